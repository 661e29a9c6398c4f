package extproc

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BenchmarkServerDecide is one request's work inside the service: read Envoy's header map, classify,
// decide and build the header mutation (target under 1 µs).
func BenchmarkServerDecide(b *testing.B) {
	src := &fixedSource{}
	src.t.Store(skewedTopology())
	s := NewServer(src, nil, nil)
	hs := envoyHeaders("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true").GetRequestHeaders()
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := s.requestHeaders(hs, false); r.GetRequestHeaders() == nil {
			b.Fatal(r)
		}
	}
}

// BenchmarkDiscoveryAnswer is the in-process work for one discovery request the front serves: the
// request phase (decide, name the cluster, ask for the response headers) and the response phase
// (read the upstream's status, hand back the cached merged answer).
func BenchmarkDiscoveryAnswer(b *testing.B) {
	src := &fixedSource{}
	src.t.Store(skewedTopology())
	s := NewServer(src, nil, nil)
	hs := envoyHeaders("GET", "/apis", "accept", acceptKubectl).GetRequestHeaders()
	upstream := upstreamStatus("200").GetResponseHeaders()
	b.ReportAllocs()
	for b.Loop() {
		r, p := s.requestHeaders(hs, false)
		if r.GetModeOverride() == nil || p == nil {
			b.Fatal(r)
		}
		a, release := s.responseHeaders(context.Background(), upstream, p)
		if a.GetImmediateResponse() == nil {
			b.Fatal(a)
		}
		release()
	}
}

// BenchmarkProcessLoad sends requests at a fixed rate, one gRPC stream per request as Envoy opens
// them, for two seconds per rate, and reports the latency distribution measured from the moment each
// stream is opened to its answer: what Envoy waits for. (The generator's own timer jitter, up to a
// millisecond on an idle Go runtime, is not the service's latency and is left out.) Run it with
// `go test ./extproc -run XXX -bench ProcessLoad -benchtime 1x`.
func BenchmarkProcessLoad(b *testing.B) {
	// skewgate serve runs with --gc-percent 400 by default.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	// Loopback TCP and a unix socket alternate within one run, so both meet the same machine load.
	for _, rate := range []int{2000, 5000, 10000} {
		for _, network := range []string{"tcp", "unix"} {
			b.Run(fmt.Sprintf("rate=%d/%s", rate, network), func(b *testing.B) { loadAt(b, network, rate) })
		}
	}
}

// loadAt runs the load at rate against a server on network (tcp or unix).
func loadAt(b *testing.B, network string, rate int) {
	h := startServerOn(b, network)
	req := envoyHeaders("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
	lat, failed, took := runLoad(h.client, req, rate, 2*time.Second)
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.90), "p90-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	b.ReportMetric(float64(len(lat))/took.Seconds(), "req/s")
	if failed > 0 {
		b.Errorf("%d of %d requests failed", failed, len(lat))
	}
}

func runLoad(client extprocv3.ExternalProcessorClient, req *extprocv3.ProcessingRequest, rate int, d time.Duration) ([]time.Duration, int64, time.Duration) {
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait) // pacing the open-loop generator, not synchronisation
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := client.Process(ctx)
			if err == nil {
				err = stream.Send(req)
			}
			if err == nil {
				_, err = stream.Recv()
			}
			lat[i] = time.Since(sent)
			if err != nil {
				failed.Add(1)
				return
			}
			stream.CloseSend()
		}()
	}
	wg.Wait()
	return lat, failed.Load(), time.Since(start)
}
