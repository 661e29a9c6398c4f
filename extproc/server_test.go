package extproc

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

type fixedSource struct {
	t atomic.Pointer[discovery.Topology]
}

func (f *fixedSource) Current() *discovery.Topology { return f.t.Load() }

var verbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func doc(hash string, groups ...apidiscoveryv2.APIGroupDiscovery) *discovery.Document {
	return &discovery.Document{Hash: hash, Groups: groups}
}

func grp(name, version string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIGroupDiscovery {
	g := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: version, Resources: rs}}}
	g.Name = name
	return g
}

func rsc(name string, subs ...string) apidiscoveryv2.APIResourceDiscovery {
	r := apidiscoveryv2.APIResourceDiscovery{Resource: name, Verbs: verbs, Scope: apidiscoveryv2.ScopeNamespace,
		ResponseKind: &metav1.GroupVersionKind{Kind: strings.ToUpper(name[:1]) + name[1:len(name)-1]}}
	for _, s := range subs {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: s, Verbs: []string{"get", "create", "update", "patch"}})
	}
	return r
}

// skewedTopology: old (v1.35-like) and new (v1.36-like, with mutatingadmissionpolicies) both ready;
// "gone" serves widgets.example.com and is not ready.
func skewedTopology() *discovery.Topology {
	return discovery.Build("test-1", time.Now(), skewedFacts())
}

func skewedFacts() []discovery.UpstreamFacts {
	core := doc("core", grp("", "v1", rsc("pods", "exec", "log", "status"), rsc("configmaps"), rsc("namespaces", "status", "finalize")))
	old := doc("old", grp("apps", "v1", rsc("deployments", "scale")), grp("admissionregistration.k8s.io", "v1", rsc("validatingadmissionpolicies", "status")))
	neu := doc("new", grp("apps", "v1", rsc("deployments", "scale")), grp("admissionregistration.k8s.io", "v1", rsc("validatingadmissionpolicies", "status"), rsc("mutatingadmissionpolicies")))
	gone := doc("gone", grp("apps", "v1", rsc("deployments", "scale")), grp("admissionregistration.k8s.io", "v1", rsc("validatingadmissionpolicies", "status")), grp("example.com", "v1", rsc("widgets")))
	return []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "old", Ready: true, Version: "v1.35.4"}, API: core, APIs: old},
		{Upstream: discovery.Upstream{Name: "new", Ready: true, Version: "v1.36.3"}, API: core, APIs: neu},
		{Upstream: discovery.Upstream{Name: "gone", Ready: false, Version: "v1.36.3"}, API: core, APIs: gone},
	}
}

type harness struct {
	client extprocv3.ExternalProcessorClient
	src    *fixedSource
	reg    *prometheus.Registry
	srv    *Server
}

func startServer(t testing.TB, opts ...Option) *harness {
	t.Helper()
	return startServerOn(t, "tcp", opts...)
}

// startServerOn serves on loopback TCP ("tcp") or on a unix socket ("unix"), the two ways Envoy can
// reach a co-located skewgate.
func startServerOn(t testing.TB, network string, opts ...Option) *harness {
	t.Helper()
	addr, target := "127.0.0.1:0", ""
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "extproc.sock")
		target = "unix://" + addr
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	if target == "" {
		target = lis.Addr().String()
	}
	src := &fixedSource{}
	src.t.Store(skewedTopology())
	reg := prometheus.NewRegistry()
	s := NewServer(src, nil, reg, opts...)
	g := NewGRPCServer(s, GRPCOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, g, lis, time.Second) }()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &harness{client: extprocv3.NewExternalProcessorClient(conn), src: src, reg: reg, srv: s}
}

// envoyHeaders builds the header map Envoy sends: pseudo-headers first, values in raw_value.
func envoyHeaders(method, path string, extra ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{{Key: ":authority", RawValue: []byte("front.example")}, {Key: ":scheme", RawValue: []byte("https")}}
	if method != "" {
		hs = append(hs, &corev3.HeaderValue{Key: ":method", RawValue: []byte(method)})
	}
	if path != "\x00none" {
		hs = append(hs, &corev3.HeaderValue{Key: ":path", RawValue: []byte(path)})
	}
	for i := 0; i+1 < len(extra); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: extra[i], RawValue: []byte(extra[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: method == "GET"},
	}}
}

// roundTrip sends one message on a stream of its own and returns the answer.
func (h *harness) roundTrip(t testing.TB, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	first, _ := exchangeBoth(t, h, req)
	return first
}

// upstreamStatus is the response_headers message Envoy sends for an upstream answer with this status.
func upstreamStatus(code string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(code)}, {Key: "content-type", RawValue: []byte("application/json")},
		}},
	}}}
}

// exchange runs one request's stream the way Envoy does: the request headers, then, only if the
// answer asked for them (mode_override with response headers SEND), the upstream's response headers
// with the given status. md is gRPC metadata Envoy adds (per-route grpc_initial_metadata). It returns
// the request-phase answer and the answer that decides the response (the same when there is no
// response phase).
func (h *harness) exchange(t testing.TB, req *extprocv3.ProcessingRequest, upstream string, md ...string) (first, last *extprocv3.ProcessingResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	if first, err = stream.Recv(); err != nil {
		t.Fatal(err)
	}
	last = first
	if first.GetModeOverride().GetResponseHeaderMode() == extprocfilterv3.ProcessingMode_SEND {
		if err := stream.Send(upstreamStatus(upstream)); err != nil {
			t.Fatal(err)
		}
		if last, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// The service ends the call once Envoy half-closes.
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the half-close: %v, want EOF", err)
	}
	return first, last
}

type want struct {
	code    int    // 0: continue
	cluster string // the routing header's value
	reason  string // for immediate responses
	kind    string // a discovery document served with 200 (after an upstream 200): its kind
}

func check(t *testing.T, name string, resp *extprocv3.ProcessingResponse, w want) {
	t.Helper()
	if w.kind != "" {
		ir := resp.GetImmediateResponse()
		var tm metav1.TypeMeta
		if ir == nil || ir.Status.Code != 200 || json.Unmarshal(ir.Body, &tm) != nil || tm.Kind != w.kind {
			t.Errorf("%s: want a served %s, got %v", name, w.kind, resp)
		}
		return
	}
	if w.code != 0 {
		ir := resp.GetImmediateResponse()
		if ir == nil {
			t.Errorf("%s: want immediate %d, got %v", name, w.code, resp)
			return
		}
		var st metav1.Status
		if err := json.Unmarshal(ir.Body, &st); err != nil || int(ir.Status.Code) != w.code || int(st.Code) != w.code || string(st.Reason) != w.reason || st.Kind != "Status" {
			t.Errorf("%s: immediate %d %s, want %d %s (%v)", name, ir.Status.Code, ir.Body, w.code, w.reason, err)
		}
		return
	}
	hr := resp.GetRequestHeaders()
	if hr == nil || hr.Response == nil || !hr.Response.ClearRouteCache || hr.Response.HeaderMutation == nil {
		t.Errorf("%s: want a header mutation with clear_route_cache, got %v", name, resp)
		return
	}
	if got := routeHeader(t, hr.Response.HeaderMutation); got != w.cluster {
		t.Errorf("%s: routing header %q, want %q", name, got, w.cluster)
	}
}

// routeHeader returns the routing header a mutation sets; it must be set exactly once and replace
// any client copy (append false: Envoy's mutation_utils.cc overwrites).
func routeHeader(t testing.TB, m *extprocv3.HeaderMutation) string {
	t.Helper()
	var vals []string
	for _, h := range m.GetSetHeaders() {
		if h.Header.Key == wire.RouteHeader {
			vals = append(vals, string(h.Header.RawValue))
			if h.Append == nil || h.Append.Value {
				t.Errorf("routing header set with append %v, want an explicit false", h.Append)
			}
		}
	}
	if len(vals) != 1 {
		t.Errorf("routing header set %d times (%q), want once", len(vals), vals)
		return ""
	}
	return vals[0]
}

func TestProcessTable(t *testing.T) {
	h := startServer(t)
	newOnly := want{cluster: wire.UpstreamCluster("new")}
	schemas := want{cluster: wire.SetCluster([]string{"gone", "new"})}
	unavailable := want{code: 503, reason: "ServiceUnavailable"}
	bad := want{code: 400, reason: "BadRequest"}
	pass := want{cluster: wire.AllCluster}
	cases := []struct {
		method, path string
		w            want
	}{
		// served by the ready v1.36 only
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", newOnly},
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true", newOnly},
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p1", newOnly},
		{"POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", newOnly},
		{"PUT", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p1", newOnly},
		{"PATCH", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p1", newOnly},
		{"DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p1", newOnly},
		{"DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", newOnly},
		{"GET", "/apis/admissionregistration.k8s.io/v1/watch/mutatingadmissionpolicies", newOnly},
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=1&resourceVersion=0&allowWatchBookmarks=true", newOnly},
		// served by every upstream: the default route
		{"GET", "/api/v1/pods", pass},
		{"GET", "/api/v1/namespaces/default/pods", pass},
		{"GET", "/api/v1/namespaces/default/pods/p", pass},
		{"POST", "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=true", pass},
		{"GET", "/api/v1/namespaces/default/pods/p/log?follow=true", pass},
		{"PUT", "/api/v1/namespaces/default/pods/p/status", pass},
		{"GET", "/api/v1/namespaces/default/configmaps?watch=true", pass},
		{"PUT", "/api/v1/namespaces/ns1/finalize", pass},
		{"GET", "/apis/apps/v1/namespaces/default/deployments", pass},
		{"PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale", pass},
		{"GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", pass},
		// served only by the unready upstream: 503, never 404
		{"GET", "/apis/example.com/v1/widgets", unavailable},
		{"GET", "/apis/example.com/v1/namespaces/x/widgets/w", unavailable},
		// served by nobody: an apiserver's genuine 404
		{"GET", "/apis/nothing.example/v1/things", pass},
		{"GET", "/api/v2/pods", pass},
		// discovery paths, served from the merged documents (Accept variants: TestDiscoveryNegotiation)
		{"GET", "/api", want{kind: "APIVersions"}},
		{"GET", "/api/v1", want{kind: "APIResourceList"}},
		{"GET", "/apis", want{kind: "APIGroupList"}},
		{"GET", "/apis/apps", want{kind: "APIGroup"}},
		{"GET", "/apis/admissionregistration.k8s.io/v1", want{kind: "APIResourceList"}},
		{"GET", "/apis/nothing.example", pass},
		{"GET", "/apis/nothing.example/v1", pass},
		{"POST", "/apis", pass},
		// non-resource
		{"GET", "/healthz", pass},
		{"GET", "/readyz?verbose", pass},
		{"GET", "/livez", pass},
		{"GET", "/version", pass},
		{"GET", "/metrics", pass},
		// the API schemas: nobody serves every resource, so the newest version (gone and new; new
		// is ready), never a mix of apiservers
		{"GET", "/openapi/v3", schemas},
		{"GET", "/openapi/v3/apis/admissionregistration.k8s.io/v1?hash=ABC", schemas},
		{"GET", "/openapi/v2", schemas},
		{"GET", "/openapi", schemas},
		{"GET", "/openapiv2", pass},
		{"GET", "/openapi-x/v3", pass},
		{"GET", "/", pass},
		// odd and malformed
		{"GET", "//", pass},
		{"GET", "/apis/admissionregistration.k8s.io/v1/../v1/mutatingadmissionpolicies", pass},
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmission%70olicies", newOnly},
		{"GET", "/apis/x/v1/%zz", bad},
		{"GET", "/apis/x/v1/a\x01b", bad},
		{"GET", "/" + strings.Repeat("a", 64<<10), pass},
		{"GET", "/apis/\xff\xfe/v1/things", pass},
		{"GET", "relative/path", bad},
		{"GET", "?x", bad},
		{"GET", "\x00none", bad},
		{"GET", "/api/v1/watch", bad},
	}
	outcomes := map[string]int{}
	for _, c := range cases {
		first, last := h.exchange(t, envoyHeaders(c.method, c.path), "200")
		check(t, c.method+" "+c.path, last, c.w)
		switch {
		case c.w.kind != "":
			outcomes[OutcomeDiscovery]++
			check(t, c.method+" "+c.path+" (request phase)", first, pass)
		case c.w.code == 400:
			outcomes[OutcomeInvalid]++
		case c.w.code == 503:
			outcomes[OutcomeUnavailable]++
		case c.w.cluster != wire.AllCluster:
			outcomes[OutcomeRouted]++
		}
	}
	// The metrics count what the table expects: every served discovery document went through the
	// response phase, and each decision landed in its outcome.
	for _, o := range []string{OutcomeDiscovery, OutcomeInvalid, OutcomeUnavailable, OutcomeRouted} {
		if got := testutil.ToFloat64(h.srv.metrics.decisions.WithLabelValues(o)); int(got) != outcomes[o] {
			t.Errorf("decisions{outcome=%q} = %v, want %d", o, got, outcomes[o])
		}
	}
	if got := testutil.ToFloat64(h.srv.metrics.discoveryResponses.WithLabelValues(DiscoveryServed)); int(got) != outcomes[OutcomeDiscovery] {
		t.Errorf("discovery served = %v, want %d", got, outcomes[OutcomeDiscovery])
	}
	if got := testutil.CollectAndCount(h.srv.metrics.decisions); got != 9 {
		t.Errorf("%d decision outcomes exported, want 9", got)
	}
}

// A client cannot choose the cluster: its copy of the routing header is always replaced (the
// default decision names skewgate-all too). Identity headers are not ext_proc's to touch: the
// listener's strip filter removed client copies, the Lua filter set the real ones.
func TestSpoofedHeadersAreRemoved(t *testing.T) {
	h := startServer(t)
	resp := h.roundTrip(t, envoyHeaders("GET", "/api/v1/pods", wire.RouteHeader, "skewgate-upstream-old",
		"X-Remote-User", "admin", "x-remote-group", "system:masters", "X-Remote-Extra-Scopes", "all"))
	m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if got := routeHeader(t, m); got != wire.AllCluster {
		t.Errorf("routing header %q, want %q", got, wire.AllCluster)
	}
	if len(m.GetRemoveHeaders()) != 0 || len(m.GetSetHeaders()) != 1 {
		t.Errorf("want only the routing header set, got %v", m)
	}
}

// TestUnsyncedLeavesRoutingToEnvoy: without a Topology (a restarted skewgate before its first
// snapshot) ext_proc names no cluster, so the route Envoy's own table picks stands (its skew routes,
// kept from before the restart, route skewed resources right); naming skewgate-all would send them
// to any apiserver. The answer still clears the route cache, so the route is chosen again on the
// headers the request arrived with, and it leaves the identity headers alone.
func TestUnsyncedLeavesRoutingToEnvoy(t *testing.T) {
	h := startServer(t)
	h.src.t.Store(nil)
	for _, path := range []string{"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "/apis", "/healthz", "/openapi/v3"} {
		resp := h.roundTrip(t, envoyHeaders("GET", path, "x-remote-user", "mallory"))
		hr := resp.GetRequestHeaders().GetResponse()
		if hr == nil || !hr.ClearRouteCache || hr.HeaderMutation == nil {
			t.Fatalf("%s: want a header mutation with clear_route_cache, got %v", path, resp)
		}
		for _, s := range hr.HeaderMutation.GetSetHeaders() {
			if s.Header.Key == wire.RouteHeader {
				t.Errorf("%s: routing header %q set without a Topology", path, s.Header.RawValue)
			}
		}
		if len(hr.HeaderMutation.GetRemoveHeaders()) != 0 || len(hr.HeaderMutation.GetSetHeaders()) != 0 {
			t.Errorf("%s: want an empty mutation, got %v", path, hr.HeaderMutation)
		}
	}
	if got := testutil.ToFloat64(h.srv.metrics.decisions.WithLabelValues(OutcomeUnsynced)); got != 4 {
		t.Errorf("unsynced decisions = %v, want 4", got)
	}
}

// Envoy < 1.37 keeps the stream open after the headers; later phases (if a processing mode sends
// them) get an answer, and the end of the stream ends the call quietly.
func TestOtherPhasesAreAnswered(t *testing.T) {
	h := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*extprocv3.ProcessingRequest{
		envoyHeaders("GET", "/api/v1/pods"),
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("x")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{}}},
		{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
	}
	for i, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("phase %d: %v", i, err)
		}
		if resp.Response == nil {
			t.Fatalf("phase %d: empty response", i)
		}
	}
	if got := testutil.ToFloat64(h.srv.metrics.streams); got != 1 {
		t.Errorf("streams in flight = %v, want 1", got)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("Recv after CloseSend: %v, want io.EOF (the server ended the stream cleanly)", err)
	}
}

func BenchmarkDecide(b *testing.B) {
	src := &fixedSource{}
	src.t.Store(skewedTopology())
	b.ReportAllocs()
	for b.Loop() {
		const path = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true"
		c, _ := decision.Classify("GET", path)
		if a := src.Current().Table().Decide(decision.Request{Method: "GET", Path: path, Class: c}); a.Action != discovery.ActionRoute {
			b.Fatal(a)
		}
	}
}

func BenchmarkProcessRoundTrip(b *testing.B) {
	h := startServer(b)
	req := envoyHeaders("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
	b.ReportAllocs()
	for b.Loop() {
		h.roundTrip(b, req)
	}
}

func TestIsSchemaPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/openapi": true, "/openapi/v2": true, "/openapi/v3/apis/apps/v1?hash=X": true, "/openapi?x": true,
		"/openapiv2": false, "/openapi-x": false, "/apis/openapi": false, "/": false, "/OPENAPI/v2": false,
		// ext_proc sees the :path Envoy normalized before routing (normalize_path, merge_slashes):
		// "//openapi" and "/openapi/../api" never reach it as such. Both sides test the same bytes,
		// so an escaped form Envoy keeps ("/%6Fpenapi", "/openapi%2Fv2") is no schema path to
		// either, and the default route gives it to any apiserver, which serves it as it would.
		"/openapi#f": true, "/%6Fpenapi/v2": false, "/openapi%2Fv2": false,
	} {
		if got := decision.IsSchemaPath(path); got != want {
			t.Errorf("decision.IsSchemaPath(%q) = %v, want %v", path, got, want)
		}
	}
}
