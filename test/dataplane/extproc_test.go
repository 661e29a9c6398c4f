package dataplane

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	clocktesting "k8s.io/utils/clock/testing"
)

// processor is an in-test ext_proc server; answer is called for every message.
type processor struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
	md     chan metadata.MD
}

func (p *processor) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	if p.md != nil {
		md, _ := metadata.FromIncomingContext(s.Context())
		p.md <- md
	}
	for {
		req, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		resp, err := p.answer(req)
		if err != nil {
			return err
		}
		if resp != nil {
			if err := s.Send(resp); err != nil {
				return err
			}
		}
	}
}

// stalling answers like answer, once release is closed.
func stalling(release <-chan struct{}, answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)) func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	return func(r *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		<-release
		return answer(r)
	}
}

// stall is a processor's answer that comes only once the test ends: past any message timeout,
// which the test fires by stepping the data plane's fake clock (stepPastTimeout), not by waiting.
func stall(t *testing.T) <-chan struct{} {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return release
}

// stepPastTimeout waits until ready (nil: at once) and an ext_proc message timer is armed on clk
// (the only timers on it), then steps clk by d.
func stepPastTimeout(t *testing.T, clk *clocktesting.FakeClock, d time.Duration, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ready != nil && !ready() || !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("no ext_proc message timer armed")
		}
		time.Sleep(time.Millisecond) // waiting for the request to reach ext_proc, not for time to pass
	}
	clk.Step(d)
}

// getPastTimeout sends GET url through c and, while it waits for the processor (once ready), fires
// the message timeout (timeout, on clk).
func getPastTimeout(t *testing.T, c *http.Client, clk *clocktesting.FakeClock, timeout time.Duration, url string, ready func() bool, hdr ...string) (int, string) {
	t.Helper()
	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{code: resp.StatusCode, body: string(b)}
	}()
	stepPastTimeout(t, clk, timeout, ready)
	r := <-done
	if r.err != nil {
		t.Fatalf("GET %s: %v", url, r.err)
	}
	return r.code, r.body
}

func startProcessor(t *testing.T, answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)) string {
	return startProcessorMD(t, answer, nil)
}

func startProcessorMD(t *testing.T, answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error), md chan metadata.MD) string {
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, &processor{answer: answer, md: md})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// extprocCluster is the HTTP/2 plaintext cluster of the processor.
func extprocCluster(t *testing.T, addr string) *clusterv3.Cluster {
	c := plainCluster("extproc", addr)
	c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": anyOf(t, &httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})}
	return c
}

// extprocFilter is skewgate's ext_proc filter shape: request headers only, fail-open, mutation
// rules disallow_system + disallow_is_error.
func extprocFilter(t *testing.T, mutate func(*extprocfilterv3.ExternalProcessor)) *hcmv3.HttpFilter {
	cfg := &extprocfilterv3.ExternalProcessor{
		GrpcService:      &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "extproc"}}},
		FailureModeAllow: true, MessageTimeout: durationpb.New(time.Second),
		ProcessingMode: &extprocfilterv3.ProcessingMode{RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND,
			ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP, RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP},
		MutationRules: &mutationrulesv3.HeaderMutationRules{DisallowSystem: wrapperspb.Bool(true), DisallowIsError: wrapperspb.Bool(true)},
	}
	if mutate != nil {
		mutate(cfg)
	}
	return httpFilter(t, "envoy.filters.http.ext_proc", cfg)
}

func setHdr(k, v string, appendV *bool) *corev3.HeaderValueOption {
	o := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	if appendV != nil {
		o.Append = wrapperspb.Bool(*appendV)
	}
	return o
}

func headersResponse(clear bool, set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}, ClearRouteCache: clear}}}}
}

// TestExtProcRouteCache: ext_proc clears the route cache only when its response carries a header
// mutation and clear_route_cache (route_cache_action DEFAULT); its fail-open paths (message
// timeout, gRPC error) keep the route chosen from the client's headers.
func TestExtProcRouteCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
		want   string
		stalls bool // answers only past the message timeout
	}{
		{"mutation with clear_route_cache re-matches", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return headersResponse(true, setHdr("x-route", "b", nil)), nil
		}, "b", false},
		{"mutation without clear_route_cache keeps the route", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return headersResponse(false, setHdr("x-route", "b", nil)), nil
		}, "a", false},
		{"clear_route_cache without a mutation keeps the route", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{ClearRouteCache: true}}}}, nil
		}, "a", false},
		{"message timeout fails open on the old route", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return headersResponse(true, setHdr("x-route", "b", nil)), nil
		}, "a", true},
		{"gRPC error fails open on the old route", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return nil, errors.New("processor broken")
		}, "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newUpstream(t, "a"), newUpstream(t, "b")
			answer := tc.answer
			if tc.stalls {
				answer = stalling(stall(t), answer)
			}
			ep := startProcessor(t, answer)
			clk := clocktesting.NewFakeClock(time.Now())
			f := startFrontWith(t, Delta, func(c *Config) { c.Clock = clk }, listener(t, nil, extprocFilter(t, nil)),
				routes(routeByHeader("by-header", "x-route")), plainCluster("a", a.addr()), plainCluster("b", b.addr()), extprocCluster(t, ep))
			f.waitActive("a")
			f.waitActive("b")
			f.waitActive("extproc")
			var code int
			var body string
			if tc.stalls {
				code, body = getPastTimeout(t, f.client(false), clk, time.Second, f.url("/"), nil, "x-route", "a")
			} else {
				code, body = get(t, f.client(false), f.url("/"), "x-route", "a")
			}
			if code != 200 || body != tc.want {
				t.Errorf("%d %q, want 200 from %s", code, body, tc.want)
			}
		})
	}
}

// TestExtProcFailClosed: without failure_mode_allow a message timeout answers 504 and a gRPC error
// 500; a rejected mutation answers 500 even with failure_mode_allow.
func TestExtProcFailClosed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		allow     bool
		answer    func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
		wantCode  int
		upstreams int
	}{
		{"timeout", false, nil, 504, 0}, // nil: answers only past the message timeout
		{"gRPC error", false, func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return nil, errors.New("broken")
		}, 500, 0},
		{"disallowed mutation with disallow_is_error", true, func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return headersResponse(false, setHdr(":path", "/other", nil)), nil
		}, 500, 0},
		{"x-envoy header without allow_envoy fails with disallow_is_error", true, func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return headersResponse(false, setHdr("x-envoy-foo", "1", nil)), nil
		}, 500, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newUpstream(t, "a")
			answer := tc.answer
			if answer == nil {
				answer = stalling(stall(t), func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) { return nil, nil })
			}
			ep := startProcessor(t, answer)
			clk := clocktesting.NewFakeClock(time.Now())
			f := startFrontWith(t, Delta, func(c *Config) { c.Clock = clk }, listener(t, nil, extprocFilter(t, func(c *extprocfilterv3.ExternalProcessor) { c.FailureModeAllow = tc.allow })),
				routes(routeTo("default", "a")), plainCluster("a", a.addr()), extprocCluster(t, ep))
			f.waitActive("a")
			f.waitActive("extproc")
			var code int
			if tc.answer == nil {
				code, _ = getPastTimeout(t, f.client(false), clk, time.Second, f.url("/"), nil)
			} else {
				code, _ = get(t, f.client(false), f.url("/"))
			}
			if code != tc.wantCode || a.count() != tc.upstreams {
				t.Errorf("%d with %d upstream requests, want %d with %d", code, a.count(), tc.wantCode, tc.upstreams)
			}
		})
	}
}

// TestExtProcImmediateResponse: an ImmediateResponse in the request phase answers without the
// upstream, with its status, headers and body; an unset status is 200.
func TestExtProcImmediateResponse(t *testing.T) {
	a := newUpstream(t, "a")
	ep := startProcessor(t, func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_NotModified},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHdr("etag", `"x"`, nil)}},
		}}}, nil
	})
	f := startFront(t, Delta, listener(t, nil, extprocFilter(t, nil)), routes(routeTo("default", "a")), plainCluster("a", a.addr()), extprocCluster(t, ep))
	f.waitActive("a")
	f.waitActive("extproc")
	resp, err := f.client(false).Get(f.url("/apis"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified || resp.Header.Get("Etag") != `"x"` || a.count() != 0 {
		t.Errorf("%d etag %q, %d upstream requests; want 304 with the processor's ETag and no upstream request", resp.StatusCode, resp.Header.Get("Etag"), a.count())
	}
}

// TestExtProcPerRoute: the cached route's ExtProcPerRoute adds grpc_initial_metadata to the stream
// or disables the filter for the request.
func TestExtProcPerRoute(t *testing.T) {
	a := newUpstream(t, "a")
	mds := make(chan metadata.MD, 8)
	ep := startProcessorMD(t, func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		return headersResponse(false, setHdr("x-seen", "1", nil)), nil
	}, mds)
	anon := routeTo("anonymous", "a", exact("x-kind", "anon"))
	anon.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.ext_proc": anyOf(t, &extprocfilterv3.ExtProcPerRoute{
		Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: &extprocfilterv3.ExtProcOverrides{
			GrpcInitialMetadata: []*corev3.HeaderValue{{Key: "x-skewgate-credentials", Value: "none"}}}}})}
	off := routeTo("disabled", "a", exact("x-kind", "off"))
	off.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.ext_proc": anyOf(t, &extprocfilterv3.ExtProcPerRoute{
		Override: &extprocfilterv3.ExtProcPerRoute_Disabled{Disabled: true}})}
	f := startFront(t, Delta, listener(t, nil, extprocFilter(t, nil)), routes(anon, off, routeTo("default", "a")), plainCluster("a", a.addr()), extprocCluster(t, ep))
	f.waitActive("a")
	f.waitActive("extproc")
	c := f.client(false)
	get(t, c, f.url("/"), "x-kind", "anon")
	if md := <-mds; len(md.Get("x-skewgate-credentials")) != 1 || md.Get("x-skewgate-credentials")[0] != "none" {
		t.Errorf("anonymous route: stream metadata %v, want x-skewgate-credentials=none", md)
	}
	get(t, c, f.url("/"))
	if md := <-mds; len(md.Get("x-skewgate-credentials")) != 0 {
		t.Errorf("default route: stream metadata %v, want no override", md)
	}
	get(t, c, f.url("/"), "x-kind", "off")
	if a.last().Header.Get("x-seen") != "" || len(mds) != 0 {
		t.Error("disabled per route, but the processor was called")
	}
}
