package extproc

import (
	"github.com/skewgate/skewgate/internal/openapitest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/discovery"
)

// Protobuf renderings of the front's OpenAPI documents are made once at a time per document, and the
// background rendering starts once per Topology version.

// holdRender is a protobuf rendering that counts its calls and ends only when released.
type holdRender struct {
	calls   atomic.Int32
	release chan struct{}
	out     []byte
}

func newHoldRender(out string) *holdRender {
	return &holdRender{release: make(chan struct{}), out: []byte(out)}
}

func (h *holdRender) render([]byte) ([]byte, error) {
	h.calls.Add(1)
	<-h.release
	return h.out, nil
}

// waitJoined waits until at least n requests joined the rendering of hash in flight in f.
func waitJoined(t *testing.T, f *frontOpenAPI, hash string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f.mu.Lock()
		r := f.rendering[hash]
		joined := r != nil && r.waiters >= n
		f.mu.Unlock()
		if joined {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests did not join the rendering in flight", n)
		}
		time.Sleep(time.Millisecond) // polling the requests' goroutines
	}
}

// TestOpenAPIProtobufSingleFlight: concurrent first protobuf requests for a merged document share one
// rendering, within the cache's cap and past it; past it the rendering is not kept (the next request
// renders again) and nothing stays behind.
func TestOpenAPIProtobufSingleFlight(t *testing.T) {
	spec := specOf(openapitest.Doc(t, "v1.36.3", "apis/apps/v1"), time.Now())
	const n = 16
	for _, c := range []struct {
		name     string
		maxBytes int
		kept     bool
	}{{"within the cap", maxProtoBytes, true}, {"past the cap", 4, false}} {
		f := newFrontOpenAPI(nil)
		f.maxBytes = c.maxBytes
		h := newHoldRender("rendered-once")
		f.render = h.render
		bodies := make(chan []byte, n)
		for range n {
			go func() {
				bodies <- f.document("apis/apps/v1", spec, &openAPIRequest{accept: acceptProto}).GetImmediateResponse().GetBody()
			}()
		}
		waitJoined(t, f, spec.Hash, n-1)
		close(h.release)
		for range n {
			if b := <-bodies; string(b) != "rendered-once" {
				t.Errorf("%s: body %q, want the one rendering", c.name, b)
			}
		}
		if got := h.calls.Load(); got != 1 {
			t.Errorf("%s: %d concurrent first requests rendered %d times, want once", c.name, n, got)
		}
		f.mu.Lock()
		_, kept := f.proto[spec.Hash]
		left := len(f.rendering)
		f.mu.Unlock()
		if kept != c.kept || left != 0 {
			t.Errorf("%s: rendering kept %v (want %v), %d renderings left in flight", c.name, kept, c.kept, left)
		}
		f.document("apis/apps/v1", spec, &openAPIRequest{accept: acceptProto})
		want := int32(1)
		if !c.kept {
			want = 2
		}
		if got := h.calls.Load(); got != want {
			t.Errorf("%s: a later request made %d renderings in all, want %d", c.name, got, want)
		}
	}
}

// TestOpenAPIProtobufConcurrentFirstRequestsAllocate: with the real rendering,
// N concurrent first protobuf requests allocate about what one does (each request alone rendering
// would allocate N times as much).
func TestOpenAPIProtobufConcurrentFirstRequestsAllocate(t *testing.T) {
	top := discovery.Build("served-1", time.Now(), servedFacts(t))
	spec := top.OpenAPIMerged(keyAdmission)
	if spec == nil {
		t.Fatal("not merged")
	}
	measure := func(n int) uint64 {
		f := newFrontOpenAPI(top)
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.document(keyAdmission, spec, &openAPIRequest{accept: acceptProto})
			}()
		}
		wg.Wait()
		runtime.ReadMemStats(&ms1)
		return ms1.TotalAlloc - ms0.TotalAlloc
	}
	one := measure(1)
	many := measure(16)
	t.Logf("merged doc %d bytes JSON; 1 request allocates %d KiB, 16 concurrent first requests %d KiB (%.1fx)", len(spec.JSON), one>>10, many>>10, float64(many)/float64(one))
	if many > 2*one {
		t.Errorf("16 concurrent first protobuf requests allocate %.1fx one: more than one rendering", float64(many)/float64(one))
	}
}

// TestOpenAPIAnswersOncePerTopologyVersion: requests racing on a new Topology version all get the
// one frontOpenAPI stored, so only that one starts the background rendering.
func TestOpenAPIAnswersOncePerTopologyVersion(t *testing.T) {
	s := NewServer(&fixedSource{}, nil, prometheus.NewRegistry())
	facts := servedFacts(t)
	for _, version := range []string{"served-1", "served-2"} {
		top := discovery.Build(version, time.Now(), facts)
		const n = 16
		got := make(chan *frontOpenAPI, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				got <- s.openAPIFor(top)
			}()
		}
		close(start)
		stored := map[*frontOpenAPI]bool{}
		for range n {
			stored[<-got] = true
		}
		if cur := s.frontOpenAPI.load(); len(stored) != 1 || !stored[cur] || cur.t.Version != version {
			t.Errorf("%s: %d racing requests got %d different answers, want the one stored", version, n, len(stored))
		}
	}
}

// TestPerTopologyRacingBuildsShareOne: the builds of racing requests are all answered with the one
// value stored, even if each of them built its own.
func TestPerTopologyRacingBuildsShareOne(t *testing.T) {
	var m perTopology[*int]
	top := discovery.Build("v1", time.Now(), nil)
	const n = 32
	got := make(chan *int, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			got <- m.get(top, func(*discovery.Topology) *int { return &i })
		}()
	}
	close(start)
	for range n {
		if v := <-got; v != m.load() {
			t.Fatalf("a racing request got %d, the stored value is %d", *v, *m.load())
		}
	}
}

// TestOpenAPINewVersionJoinsRenderingInFlight: a Topology version that serves a document whose
// rendering the previous version has in flight waits for that rendering instead of making another.
func TestOpenAPINewVersionJoinsRenderingInFlight(t *testing.T) {
	s := NewServer(&fixedSource{}, nil, prometheus.NewRegistry())
	facts := servedFacts(t)
	h := newHoldRender("rendered-by-the-previous-version")
	prev := s.frontOpenAPI.get(discovery.Build("served-1", time.Now(), facts), func(top *discovery.Topology) *frontOpenAPI {
		f := newFrontOpenAPI(top) // stored without openAPIFor: no background rendering
		f.render = h.render
		return f
	})
	spec := prev.merged[keyAdmission]
	if spec == nil {
		t.Fatal("not merged")
	}
	go prev.protobuf(spec)
	waitJoined(t, prev, spec.Hash, 0)
	next := s.openAPIFor(discovery.Build("served-2", time.Now(), facts))
	if next == prev || next.merged[keyAdmission].Hash != spec.Hash {
		t.Fatal("the next version does not serve the same document")
	}
	body := make(chan []byte)
	go func() {
		body <- next.document(keyAdmission, next.merged[keyAdmission], &openAPIRequest{accept: acceptProto}).GetImmediateResponse().GetBody()
	}()
	waitJoined(t, next, spec.Hash, 1) // the request or the background rendering: both wait for it
	close(h.release)
	if b := <-body; string(b) != "rendered-by-the-previous-version" || h.calls.Load() != 1 {
		t.Errorf("the next version answered %q after %d renderings, want the previous version's one", b, h.calls.Load())
	}
}

// BenchmarkOpenAPIProtobufRender: one protobuf rendering of the largest captured document (api/v1),
// what a request waits for when it asks for a document not rendered yet.
func BenchmarkOpenAPIProtobufRender(b *testing.B) {
	spec := specOf(openapitest.Doc(b, "v1.36.3", "api/v1"), time.Now())
	b.ReportAllocs()
	for b.Loop() {
		f := newFrontOpenAPI(nil)
		if _, err := f.protobuf(spec); err != nil {
			b.Fatal(err)
		}
	}
}
