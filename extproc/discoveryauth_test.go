package extproc

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/skewgate/skewgate/internal/wire"
)

// TestDiscoveryNeedsTheApiserversConsent runs the whole ext_proc sequence Envoy runs for a discovery
// request (request_headers, then response_headers with the upstream's status) against the real
// service over gRPC: the merged document is only shown when the apiserver let the request through.
func TestDiscoveryNeedsTheApiserversConsent(t *testing.T) {
	h := startServer(t)
	top := h.src.Current()
	etag := strconv.Quote(top.APIs.ETag)
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	cases := []struct {
		name, path, accept, ifNoneMatch string
		md                              []string
		upstream                        string
		code                            int    // 0: the apiserver's answer passes through
		body                            string // in the served body
	}{
		{name: "aggregated 200", path: "/apis", accept: acceptKubectl, upstream: "200", code: 200, body: mapResourceName},
		{name: "aggregated 304 upstream, stale client ETag", path: "/apis", accept: acceptV2, ifNoneMatch: `"the-apiservers-own"`, upstream: "304", code: 200, body: mapResourceName},
		{name: "aggregated 304 upstream, merged ETag", path: "/apis", accept: acceptV2, ifNoneMatch: etag, upstream: "304", code: 304},
		{name: "aggregated 200 upstream, merged ETag", path: "/apis", accept: acceptV2, ifNoneMatch: etag, upstream: "200", code: 304},
		{name: "core 200", path: "/api", accept: acceptV2, upstream: "200", code: 200, body: `"configmaps"`},
		{name: "legacy group version 200", path: "/apis/admissionregistration.k8s.io/v1", accept: "application/json", upstream: "200", code: 200, body: `"name":"` + mapResourceName + `"`},
		{name: "legacy group 200", path: "/apis/apps", accept: "application/json", upstream: "200", code: 200, body: `"APIGroup"`},
		// A peer that does not serve the group answers 404 after authorizing the request.
		{name: "group only some upstreams serve, 404 upstream", path: "/apis/example.com/v1", accept: "application/json", upstream: "404", code: 200, body: `"widgets"`},
		{name: "no credentials, anonymous allowed", path: "/apis", accept: acceptV2, md: none, upstream: "200", code: 200, body: mapResourceName},
		{name: "no credentials, 401", path: "/apis", accept: acceptV2, md: none, upstream: "401"},
		{name: "no credentials, 403", path: "/api", accept: acceptV2, md: none, upstream: "403"},
		{name: "invalid token, 401", path: "/apis/apps/v1", accept: "application/json", upstream: "401"},
		{name: "forbidden, 403", path: "/apis", accept: acceptKubectl, upstream: "403"},
		{name: "throttled, 429", path: "/apis", accept: acceptKubectl, upstream: "429"},
		{name: "apiserver error, 500", path: "/apis", accept: acceptKubectl, upstream: "500"},
		{name: "apiserver unavailable, 503", path: "/api", accept: acceptKubectl, upstream: "503"},
		{name: "no status", path: "/apis", accept: acceptKubectl, upstream: ""},
		{name: "garbage status", path: "/apis", accept: acceptKubectl, upstream: "2OO"},
	}
	var served, passed int
	for _, c := range cases {
		extra := []string{"accept", c.accept}
		if c.ifNoneMatch != "" {
			extra = append(extra, "if-none-match", c.ifNoneMatch)
		}
		first, last := h.exchange(t, envoyHeaders("GET", c.path, extra...), c.upstream, c.md...)
		// Request phase: the request goes to an apiserver, asking Envoy for its response headers.
		wantCluster := wire.AllCluster
		if c.md != nil {
			wantCluster = wire.AnonCluster(wire.AllCluster)
		}
		check(t, c.name+" (request phase)", first, want{cluster: wantCluster})
		if !proto.Equal(first.GetModeOverride(), discoveryMode) {
			t.Errorf("%s: mode_override %v, want %v", c.name, first.GetModeOverride(), discoveryMode)
		}
		if c.code == 0 {
			passed++
			rh := last.GetResponseHeaders()
			if rh == nil || rh.GetResponse().GetHeaderMutation() != nil || rh.GetResponse().GetBodyMutation() != nil || last.GetImmediateResponse() != nil {
				t.Errorf("%s: upstream %q: want its answer untouched, got %v", c.name, c.upstream, last)
			}
			continue
		}
		served++
		ir := last.GetImmediateResponse()
		if ir == nil || int(ir.Status.Code) != c.code {
			t.Errorf("%s: upstream %q: want the merged answer %d, got %v", c.name, c.upstream, c.code, last)
			continue
		}
		if !strings.Contains(string(ir.Body), c.body) {
			t.Errorf("%s: body lacks %s: %.300s", c.name, c.body, ir.Body)
		}
		if c.code == 304 && (len(ir.Body) != 0 || header(ir, "etag") != etag) {
			t.Errorf("%s: 304 with body %d bytes and ETag %q", c.name, len(ir.Body), header(ir, "etag"))
		}
	}
	if got := testutil.ToFloat64(h.srv.metrics.discoveryResponses.WithLabelValues(DiscoveryServed)); int(got) != served {
		t.Errorf("served = %v, want %d", got, served)
	}
	if got := testutil.ToFloat64(h.srv.metrics.discoveryResponses.WithLabelValues(DiscoveryPassed)); int(got) != passed {
		t.Errorf("passed = %v, want %d", got, passed)
	}
}

// TestDiscoveryThePeersAnswerItself: requests the front does not merge, by their method and path,
// never ask for the response; profile=nopeer (in Accept, read only once the request is authorized)
// is TestDiscoveryNegotiation's.
func TestDiscoveryThePeersAnswerItself(t *testing.T) {
	h := startServer(t)
	for _, req := range []*extprocv3.ProcessingRequest{
		envoyHeaders("GET", "/apis/nothing.example/v1"),
		envoyHeaders("POST", "/apis"),
		envoyHeaders("HEAD", "/apis"),
		envoyHeaders("GET", "/api/v1/pods"),
		envoyHeaders("GET", "/version"),
	} {
		first, _ := h.exchange(t, req, "200")
		if first.GetModeOverride() != nil {
			t.Errorf("%v: asks for the response headers", req)
		}
		check(t, "pass", first, want{cluster: wire.AllCluster})
	}
	// Before the first Topology there is nothing to merge: the apiserver answers.
	h.src.t.Store(nil)
	if first, _ := h.exchange(t, envoyHeaders("GET", "/apis", "accept", acceptV2), "200"); first.GetModeOverride() != nil {
		t.Errorf("unsynced: asks for the response headers")
	}
}

// TestDiscoveryFailPaths: the stream ends after the request phase (Envoy's message timeout or a
// reset before the upstream answered), or response headers come on a stream that holds no answer:
// nothing is served, nothing is kept.
func TestDiscoveryFailPaths(t *testing.T) {
	h := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Envoy gives up after the request phase: it cancels the stream.
	sctx, scancel := context.WithCancel(ctx)
	stream, err := h.client.Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(envoyHeaders("GET", "/apis", "accept", acceptV2)); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetModeOverride() == nil {
		t.Fatalf("request phase: %v %v", resp, err)
	}
	scancel()
	deadline := time.Now().Add(3 * time.Second)
	for testutil.ToFloat64(h.srv.metrics.streams) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a cancelled stream is still open on the server")
		}
		time.Sleep(10 * time.Millisecond) // polling the gauge
	}

	// Response headers on a non-discovery stream (a processing mode that sends them for everything).
	_, last := exchangeBoth(t, h, envoyHeaders("GET", "/api/v1/pods"), upstreamStatus("200"))
	if last.GetResponseHeaders() == nil || last.GetImmediateResponse() != nil {
		t.Errorf("response headers without a pending answer: %v", last)
	}
	if got := testutil.ToFloat64(h.srv.metrics.discoveryResponses.WithLabelValues(DiscoveryUnexpected)); got != 1 {
		t.Errorf("unexpected = %v, want 1", got)
	}

	// A second response_headers on the same stream (protocol violation) serves nothing again.
	stream, err = h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range []*extprocv3.ProcessingRequest{envoyHeaders("GET", "/apis", "accept", acceptV2), upstreamStatus("200"), upstreamStatus("200")} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if served := resp.GetImmediateResponse() != nil; served != (i == 1) {
			t.Errorf("message %d: immediate response %v", i, resp)
		}
	}
	stream.CloseSend()
}

// exchangeBoth sends the messages (request headers, then response headers) on one stream whatever
// the first answer says, and returns the first and the last answer.
func exchangeBoth(t testing.TB, h *harness, reqs ...*extprocv3.ProcessingRequest) (first, last *extprocv3.ProcessingResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range reqs {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = resp
		}
		last = resp
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return first, last
}
