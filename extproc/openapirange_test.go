package extproc

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"

	"github.com/skewgate/skewgate/openapi"
)

// What a Range header (and any header the front's answer depends on) may cost: nothing before an
// apiserver authorized the request, and, once it has, no more than the plain request.

// rangeCases are GET /openapi/v3 with no Range, one range, and 15 000 one-byte ranges (as many as
// Envoy's 60 KiB request header limit allows), on the flood test's 40 KB index.
var rangeCases = []struct{ name, rang string }{{"plain", ""}, {"one-range", "bytes=0-99"}, {"15000-ranges", manyRanges(15000)}}

func rangeServer(tb testing.TB) *Server {
	src := &fixedSource{}
	top := discovery.Build("range-1", time.Now(), floodFacts())
	if idx := top.OpenAPIIndex(); idx == nil || len(idx.JSON) < 15000 {
		tb.Fatalf("the index is not larger than the ranges: %v", idx)
	}
	src.t.Store(top)
	return NewServer(src, nil, nil)
}

// indexExchange is one /openapi/v3 request through both phases in process, the upstream answering
// code; it returns the front's answer (nil when the apiserver's passes).
func indexExchange(tb testing.TB, s *Server, hs *extprocv3.HttpHeaders, anonymous bool, upstream *extprocv3.HttpHeaders) *extprocv3.ImmediateResponse {
	r, p := s.requestHeaders(hs, anonymous)
	if r.GetModeOverride() == nil || p == nil {
		tb.Fatalf("the index does not wait for the response: %v", r)
	}
	a, release := s.responseHeaders(context.Background(), upstream, p)
	if release != nil {
		release()
	}
	return a.GetImmediateResponse()
}

// BenchmarkOpenAPIIndexRange is the in-process cost of one authorized GET /openapi/v3, both phases,
// plain, with one range and with 15 000 ranges.
func BenchmarkOpenAPIIndexRange(b *testing.B) {
	s := rangeServer(b)
	upstream := upstreamStatus("200").GetResponseHeaders()
	for _, c := range rangeCases {
		hs := envoyHeaders("GET", "/openapi/v3", "range", c.rang).GetRequestHeaders()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ir := indexExchange(b, s, hs, false, upstream); ir == nil {
					b.Fatal("no answer")
				}
			}
		})
	}
}

// TestOpenAPIRangeCostsNoMore: with any Range, the whole authorized exchange allocates no more
// (bytes and allocations per request, measured by the benchmark machinery) than without one, and a
// request the apiserver refuses costs the same whatever its Range and Accept say. Before the front
// answered several ranges whole, 15 000 ranges cost 200 ms and tens of MiB per request.
func TestOpenAPIRangeCostsNoMore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs benchmarks")
	}
	s := rangeServer(t)
	authorized, refused := upstreamStatus("200").GetResponseHeaders(), upstreamStatus("401").GetResponseHeaders()
	bigAccept := strings.Repeat("text/x-junk;q=0.1, ", 3000) // 57 KB: ms to negotiate, were it read
	measure := func(hs *extprocv3.HttpHeaders, anonymous bool, upstream *extprocv3.HttpHeaders, want int) testing.BenchmarkResult {
		if ir := indexExchange(t, s, hs, anonymous, upstream); (ir == nil) != (want == 0) || (ir != nil && int(ir.GetStatus().GetCode()) != want) {
			t.Fatalf("answer %v, want status %d (0: the apiserver's)", ir, want)
		}
		return testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				indexExchange(b, s, hs, anonymous, upstream)
			}
		})
	}
	// over checks got against base plus a fixed extra (bytes, allocations) per request.
	over := func(name string, got, base testing.BenchmarkResult, extraBytes, extraAllocs int64) {
		t.Helper()
		t.Logf("%s: %d B/op %d allocs/op %v/op; plain: %d B/op %d allocs/op %v/op", name,
			got.AllocedBytesPerOp(), got.AllocsPerOp(), time.Duration(got.NsPerOp()), base.AllocedBytesPerOp(), base.AllocsPerOp(), time.Duration(base.NsPerOp()))
		if got.AllocedBytesPerOp() > base.AllocedBytesPerOp()+extraBytes || got.AllocsPerOp() > base.AllocsPerOp()+extraAllocs {
			t.Errorf("%s: %d B and %d allocations per request, plain %d B and %d (allowed: +%d B, +%d)", name,
				got.AllocedBytesPerOp(), got.AllocsPerOp(), base.AllocedBytesPerOp(), base.AllocsPerOp(), extraBytes, extraAllocs)
		}
	}
	plain := measure(envoyHeaders("GET", "/openapi/v3").GetRequestHeaders(), false, authorized, 200)
	// Several ranges: exactly the plain answer (their value is not even copied).
	over("authorized, 15000 ranges", measure(envoyHeaders("GET", "/openapi/v3", "range", manyRanges(15000)).GetRequestHeaders(), false, authorized, 200), plain, 0, 0)
	// One range: a slice of the same document, plus its Content-Range header and the 206's
	// (measured: 656 B and 11 allocations more).
	over("authorized, one range", measure(envoyHeaders("GET", "/openapi/v3", "range", "bytes=0-99").GetRequestHeaders(), false, authorized, 206), plain, 1024, 16)

	// Refused (anonymous, 401): only the request and the status are read. The ranges, the Accept
	// and If-None-Match are kept as Envoy sent them, never copied or parsed: exactly the plain cost.
	refusedPlain := measure(envoyHeaders("GET", "/openapi/v3").GetRequestHeaders(), true, refused, 0)
	over("refused, 15000 ranges", measure(envoyHeaders("GET", "/openapi/v3", "range", manyRanges(15000), "if-none-match", `"x"`).GetRequestHeaders(), true, refused, 0), refusedPlain, 0, 0)
	flood := envoyHeaders("GET", "/openapi/v3", "range", manyRanges(15000), "accept", bigAccept, "if-none-match", `"x"`).GetRequestHeaders()
	over("refused, 15000 ranges and a 57 KB Accept", measure(flood, true, refused, 0), refusedPlain, 0, 0)

	// Discovery at the front likewise: a refused /apis costs the same whatever its Accept.
	discovery := func(hs *extprocv3.HttpHeaders) testing.BenchmarkResult {
		return testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				r, p := s.requestHeaders(hs, true)
				if r.GetModeOverride() == nil || p == nil {
					b.Fatalf("/apis does not wait for the response: %v", r)
				}
				if a, _ := s.responseHeaders(context.Background(), refused, p); a.GetImmediateResponse() != nil {
					b.Fatalf("refused: the front answered %v", a)
				}
			}
		})
	}
	over("refused /apis, a 57 KB Accept", discovery(envoyHeaders("GET", "/apis", "accept", bigAccept, "if-none-match", `"x"`).GetRequestHeaders()),
		discovery(envoyHeaders("GET", "/apis").GetRequestHeaders()), 0, 0)
}

// TestRequestPhaseRendersNothing: a merged document asked for in protobuf is rendered only for a
// request the apiserver authorized, never for one it refuses.
func TestRequestPhaseRendersNothing(t *testing.T) {
	src := &fixedSource{}
	top := discovery.Build("served-1", time.Now(), servedFacts(t))
	src.t.Store(top)
	s := NewServer(src, nil, nil)
	spec := top.OpenAPIMerged(keyAdmission)
	if spec == nil {
		t.Fatal("not merged")
	}
	var calls atomic.Int32
	f := newFrontOpenAPI(top, nil, openapi.FrontConfig{Render: func([]byte) ([]byte, error) { calls.Add(1); return []byte("rendered"), nil }})
	f.warmed.Do(func() {}) // no background rendering: only requests can render
	s.frontOpenAPI.get(top, func(*discovery.Topology) *frontOpenAPI { return f })

	hs := envoyHeaders("GET", "/openapi/v3/"+keyAdmission, "accept", acceptProto, "range", manyRanges(100)).GetRequestHeaders()
	for _, code := range []string{"401", "403", "429", "500"} {
		r, p := s.requestHeaders(hs, true)
		if r.GetModeOverride() == nil || p == nil {
			t.Fatalf("the merged document does not wait for the response: %v", r)
		}
		if a, release := s.responseHeaders(context.Background(), upstreamStatus(code).GetResponseHeaders(), p); a.GetImmediateResponse() != nil || release != nil {
			t.Errorf("upstream %s: the front answered %v", code, a)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d renderings for requests the apiserver refused", n)
	}
	r, p := s.requestHeaders(hs, false)
	if n := calls.Load(); n != 0 || r.GetModeOverride() == nil {
		t.Fatalf("the request phase rendered (%d) or did not wait (%v)", n, r)
	}
	a, release := s.responseHeaders(context.Background(), upstreamStatus("200").GetResponseHeaders(), p)
	release()
	if ir := a.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 200 || string(ir.Body) != "rendered" || calls.Load() != 1 {
		t.Errorf("authorized: %v after %d renderings, want the rendering whole after one", a, calls.Load())
	}
}

// TestServingSlots: an authorized answer with no slot free gets the 503 with Retry-After at once
// (no wait) and is counted busy; with a wait, it is served as soon as a slot is given back; the
// request phase and refused requests never take a slot, and a routing decision never waits for one.
func TestServingSlots(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Minute} {
		h := startServer(t, WithServingSlots(1, wait))
		h.src.t.Store(discovery.Build("openapi-1", time.Now(), openAPIFacts()))
		held, ok := h.srv.slots.acquire(context.Background())
		if !ok {
			t.Fatal("no slot")
		}
		// Refused and routed requests need no slot.
		if _, last := h.exchange(t, envoyHeaders("GET", "/openapi/v3"), "401"); last.GetImmediateResponse() != nil {
			t.Errorf("wait %v: refused: the front answered %v", wait, last)
		}
		check(t, "routing", h.roundTrip(t, envoyHeaders("GET", "/apis/admissionregistration.k8s.io/v1/"+mapResourceName)), want{cluster: wire.UpstreamCluster("new")})
		if wait == 0 {
			_, last := h.exchange(t, envoyHeaders("GET", "/openapi/v3"), "200")
			ir := last.GetImmediateResponse()
			if ir.GetStatus().GetCode() != 503 || header(ir, "retry-after") != "1" || !strings.Contains(string(ir.Body), `"reason":"ServiceUnavailable"`) {
				t.Errorf("no slot: %v, want a 503 Status with Retry-After", last)
			}
			if n := testutil.ToFloat64(h.srv.metrics.openAPIResponses.WithLabelValues(OpenAPIIndex, OpenAPIBusy)); n != 1 {
				t.Errorf("busy count %v, want 1", n)
			}
			held()
			continue
		}
		// With a wait: the answer comes once the slot is given back.
		got := make(chan error, 1)
		go func() { got <- floodOnce(h.client, envoyHeaders("GET", "/openapi/v3"), nil, "200") }() // the whole index, or an error
		select {
		case err := <-got:
			t.Fatalf("answered while the only slot is held: %v", err)
		case <-time.After(50 * time.Millisecond): // a window for a wrong early answer, not synchronisation
		}
		held()
		if err := <-got; err != nil {
			t.Errorf("after the slot came free: %v", err)
		}
		if n := testutil.ToFloat64(h.srv.metrics.openAPIResponses.WithLabelValues(OpenAPIIndex, OpenAPIBusy)); n != 0 {
			t.Errorf("busy count %v, want 0", n)
		}
	}
}
