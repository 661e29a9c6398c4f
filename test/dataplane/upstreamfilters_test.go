package dataplane

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

const hcFailPath = "/api/v1/namespaces/default/services/https:evil:443/proxy/"

// hcFailUpstream answers /readyz 200, hcFailPath with x-envoy-immediate-health-check-fail (as a
// backend behind an apiserver's proxy would), everything else 200; h2c as well as HTTP/1.1.
func hcFailUpstream(t *testing.T) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == hcFailPath {
			w.Header().Set("x-envoy-immediate-health-check-fail", "true")
		}
		io.WriteString(w, "ok")
	}))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// send sends GET path through the cluster as the router does and returns the response (body read
// and closed) or the error.
func send(c *cluster, path string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://front"+path, nil)
	resp, err := (&attempts{d: c.dp, c: c}).RoundTrip(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func protocolOptions(t testing.TB, filters ...*hcmv3.HttpFilter) map[string]*anypb.Any {
	return map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": anyOf(t, &httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}},
		HttpFilters: filters,
	})}
}

func removeResponse(h string) *headermutationv3.HeaderMutation {
	return &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{ResponseMutations: []*mutationrulesv3.HeaderMutation{
		{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}},
	}}}
}

// TestImmediateHealthCheckFail: a response carrying x-envoy-immediate-health-check-fail (any value)
// marks its host of a health-checked cluster unhealthy and excluded at once, whatever
// unhealthy_threshold says, so with panic threshold 0 the next request finds no host (UH); the next
// passing check lets it back; a cluster without active health checks ignores the header.
func TestImmediateHealthCheckFail(t *testing.T) {
	up := hcFailUpstream(t)
	addr := strings.TrimPrefix(up.URL, "http://")
	c := testCluster(t, testDP(t, 5), 0, func(cfg *clusterv3.Cluster) {
		*cfg = *plainCluster("c", addr)
		cfg.HealthChecks = hcCluster(t, 3, 1).cfg.HealthChecks // unhealthy_threshold 3
	})
	h := c.hosts[0]
	c.record(h, hcPass)
	h.checked.Store(true)
	if _, err := send(c, "/api"); err != nil {
		t.Fatalf("healthy host: %v", err)
	}
	resp, err := send(c, hcFailPath)
	if err != nil {
		t.Fatalf("the response with the header itself is delivered: %v", err)
	}
	if resp.Header.Get("x-envoy-immediate-health-check-fail") == "" {
		t.Error("without upstream filters the header reaches the client")
	}
	if h.healthy.Load() || !h.hcExcluded.Load() {
		t.Fatalf("after the header: healthy=%v excluded=%v, want FAILED_ACTIVE_HC and EXCLUDED_VIA_IMMEDIATE_HC_FAIL", h.healthy.Load(), h.hcExcluded.Load())
	}
	if _, err := send(c, "/api"); !errors.Is(err, errNoHealthyUpstream) {
		t.Fatalf("another client after the header: %v, want %v", err, errNoHealthyUpstream)
	}
	c.record(h, hcPass) // healthy_threshold 1
	if !h.available() || h.hcExcluded.Load() {
		t.Fatal("a passing check did not clear FAILED_ACTIVE_HC and EXCLUDED_VIA_IMMEDIATE_HC_FAIL")
	}

	// Without an active health checker the host monitor is the null one.
	plain := testCluster(t, testDP(t, 5), 0, func(cfg *clusterv3.Cluster) { *cfg = *plainCluster("p", addr) })
	if _, err := send(plain, hcFailPath); err != nil {
		t.Fatal(err)
	}
	if !plain.hosts[0].available() {
		t.Error("a cluster without health checks acted on the header")
	}
}

// TestUpstreamFilterChain: header_mutation removals before upstream_codec run on every upstream
// response before the router looks at it, so a removed x-envoy-immediate-health-check-fail marks
// nothing; every other chain is refused with its reason.
func TestUpstreamFilterChain(t *testing.T) {
	up := hcFailUpstream(t)
	addr := strings.TrimPrefix(up.URL, "http://")
	codec := httpFilter(t, "envoy.filters.http.upstream_codec", &upstreamcodecv3.UpstreamCodec{})
	strip := httpFilter(t, "strip", removeResponse("x-envoy-immediate-health-check-fail"))
	c := testCluster(t, testDP(t, 5), 0, func(cfg *clusterv3.Cluster) {
		*cfg = *plainCluster("c", addr)
		cfg.HealthChecks = hcCluster(t, 2, 1).cfg.HealthChecks
		cfg.TypedExtensionProtocolOptions = protocolOptions(t, strip, codec)
	})
	h := c.hosts[0]
	c.record(h, hcPass)
	h.checked.Store(true)
	resp, err := send(c, hcFailPath)
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.Header.Get("x-envoy-immediate-health-check-fail"); v != "" {
		t.Errorf("the upstream filter left the header: %q", v)
	}
	if !h.available() {
		t.Error("a header the upstream filter removed still marked the host unhealthy")
	}

	refused := []struct {
		name    string
		filters []*hcmv3.HttpFilter
		want    string
	}{
		{"codec not last", []*hcmv3.HttpFilter{codec, strip}, "upstream_codec must be the last filter"},
		{"no codec", []*hcmv3.HttpFilter{strip}, "the last upstream filter must be upstream_codec"},
		{"router upstream", []*hcmv3.HttpFilter{httpFilter(t, "r", &routerv3.Router{}), codec}, "envoy.extensions.filters.http.router.v3.Router is not supported"},
		{"request mutation", []*hcmv3.HttpFilter{httpFilter(t, "m", &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
			RequestMutations: []*mutationrulesv3.HeaderMutation{{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: "x-a"}}},
		}}), codec}, "only response header removals"},
		{"response append", []*hcmv3.HttpFilter{httpFilter(t, "m", &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
			ResponseMutations: []*mutationrulesv3.HeaderMutation{{Action: &mutationrulesv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: "x-a", Value: "1"},
			}}}},
		}}), codec}, "only response header removals"},
		{"most specific wins", []*hcmv3.HttpFilter{httpFilter(t, "m", &headermutationv3.HeaderMutation{MostSpecificHeaderMutationsWins: true}), codec}, "only response header removals"},
	}
	for _, tc := range refused {
		cfg := plainCluster("bad", addr)
		cfg.TypedExtensionProtocolOptions = protocolOptions(t, tc.filters...)
		_, err := newCluster(testDP(t, 5), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// waitWarm starts the cluster's health checks and waits for its first round.
func waitWarm(t *testing.T, c *cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.stop() })
	c.start(ctx)
	select {
	case <-c.warmed:
	case <-time.After(10 * time.Second):
		t.Fatal("cluster never warmed")
	}
}
