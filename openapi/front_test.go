package openapi

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/openapitest"
)

const acceptProto = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"

func specOf(data []byte, built time.Time) *Spec {
	return &Spec{JSON: data, Hash: Hash(data), Built: built}
}

// waits counts the requests that started waiting for a rendering (FrontConfig.OnRenderWait).
type waits struct {
	mu sync.Mutex
	n  int
	ch chan struct{}
}

func newWaits() *waits { return &waits{ch: make(chan struct{}, 1024)} }

func (w *waits) on(string) { w.ch <- struct{}{} }

// wait returns once n more requests wait.
func (w *waits) wait(n int) {
	for range n {
		<-w.ch
	}
}

func document(f *Front, key string, spec *Spec, q *Request) *Recorder {
	w := NewRecorder()
	if !f.ServeDocument(w, key, spec, q, nil) {
		return nil
	}
	return w
}

// Concurrent first protobuf requests for a merged document share one rendering, within the cache's
// cap and past it; past it the rendering is not kept (the next request renders again).
func TestProtobufSingleFlight(t *testing.T) {
	spec := specOf(openapitest.Doc(t, v136, keyApps), time.Now())
	const n = 16
	for _, c := range []struct {
		name     string
		maxBytes int
		kept     bool
	}{{"within the cap", MaxProtoBytes, true}, {"past the cap", 4, false}} {
		h := openapitest.NewHeldRender("rendered-once")
		w := newWaits()
		f := NewFront(nil, nil, FrontConfig{Render: h.Render, MaxProtoBytes: c.maxBytes, OnRenderWait: w.on})
		bodies := make(chan []byte, n)
		for range n {
			go func() { bodies <- document(f, keyApps, spec, &Request{Accept: acceptProto}).Body() }()
		}
		w.wait(n) // every request joined the one rendering in flight
		h.Release()
		for range n {
			if b := <-bodies; string(b) != "rendered-once" {
				t.Errorf("%s: body %q, want the one rendering", c.name, b)
			}
		}
		if got := h.Calls(); got != 1 {
			t.Errorf("%s: %d concurrent first requests rendered %d times, want once", c.name, n, got)
		}
		f.mu.Lock()
		_, kept := f.proto[spec.Hash]
		f.mu.Unlock()
		if kept != c.kept {
			t.Errorf("%s: rendering kept %v, want %v", c.name, kept, c.kept)
		}
		document(f, keyApps, spec, &Request{Accept: acceptProto})
		want := int32(1)
		if !c.kept {
			want = 2
		}
		if got := h.Calls(); got != want {
			t.Errorf("%s: a later request made %d renderings in all, want %d", c.name, got, want)
		}
	}
}

// With the real rendering, N concurrent first protobuf requests allocate about what one does (each
// request alone rendering would allocate N times as much).
func TestProtobufConcurrentFirstRequestsAllocate(t *testing.T) {
	spec := specOf(openapitest.Doc(t, v136, keyAdmission), time.Now())
	measure := func(n int) uint64 {
		f := NewFront(map[string]*Spec{keyAdmission: spec}, nil, FrontConfig{})
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				document(f, keyAdmission, spec, &Request{Accept: acceptProto})
			}()
		}
		wg.Wait()
		runtime.ReadMemStats(&ms1)
		return ms1.TotalAlloc - ms0.TotalAlloc
	}
	one := measure(1)
	many := measure(16)
	t.Logf("doc %d bytes JSON; 1 request allocates %d KiB, 16 concurrent first requests %d KiB (%.1fx)", len(spec.JSON), one>>10, many>>10, float64(many)/float64(one))
	if many > 2*one {
		t.Errorf("16 concurrent first protobuf requests allocate %.1fx one: more than one rendering", float64(many)/float64(one))
	}
}

// A Front made from the previous one keeps its renderings of the documents it still serves and
// joins its rendering in flight instead of making another.
func TestFrontJoinsThePreviousRendering(t *testing.T) {
	spec := specOf(openapitest.Doc(t, v136, keyApps), time.Now())
	h := openapitest.NewHeldRender("rendered-by-the-previous-front")
	w := newWaits()
	prev := NewFront(map[string]*Spec{keyApps: spec}, nil, FrontConfig{Render: h.Render, OnRenderWait: w.on})
	go prev.Protobuf(spec)
	w.wait(1)
	next := NewFront(map[string]*Spec{keyApps: spec}, prev, FrontConfig{Render: h.Render, OnRenderWait: w.on})
	body := make(chan []byte)
	go func() { body <- document(next, keyApps, spec, &Request{Accept: acceptProto}).Body() }()
	w.wait(1)
	h.Release()
	if b := <-body; string(b) != "rendered-by-the-previous-front" || h.Calls() != 1 {
		t.Errorf("the next Front answered %q after %d renderings, want the previous one's", b, h.Calls())
	}
	third := NewFront(map[string]*Spec{keyApps: spec}, next, FrontConfig{Render: h.Render})
	third.mu.Lock()
	_, kept := third.proto[spec.Hash]
	third.mu.Unlock()
	if !kept {
		t.Error("a Front made from one holding the rendering does not keep it")
	}
	if other := NewFront(nil, next, FrontConfig{}); len(other.proto) != 0 {
		t.Error("a Front kept the rendering of a document it does not serve")
	}
}

// Warm renders every merged document once, and stops when its context ends or the Front is no
// longer current.
func TestFrontWarm(t *testing.T) {
	a, b := specOf(openapitest.Doc(t, v136, keyApps), time.Now()), specOf(openapitest.Doc(t, v136, keyAdmission), time.Now())
	var calls atomic.Int32
	render := func([]byte) ([]byte, error) { calls.Add(1); return []byte("r"), nil }
	f := NewFront(map[string]*Spec{keyApps: a, keyAdmission: b}, nil, FrontConfig{Render: render})
	f.Warm(context.Background(), func() bool { return true })
	f.Warm(context.Background(), func() bool { return true })
	if calls.Load() != 2 {
		t.Errorf("%d renderings, want one per document", calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := NewFront(map[string]*Spec{keyApps: a, keyAdmission: b}, nil, FrontConfig{Render: render})
	g.Warm(ctx, func() bool { return true })
	g.Warm(context.Background(), func() bool { return false })
	if calls.Load() != 2 {
		t.Errorf("a cancelled or superseded Warm rendered %d documents", calls.Load()-2)
	}
}

// Any number of Accept spellings share one protobuf rendering per document, and the renderings
// never exceed the byte cap.
func TestProtobufCacheBounded(t *testing.T) {
	spec := specOf(openapitest.Doc(t, v136, keyApps), time.Now())
	f := NewFront(nil, nil, FrontConfig{})
	for i := range 200 {
		accept := acceptProto + ";x=" + strconv.Itoa(i)
		if i%2 == 1 {
			accept = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf;q=0.8;y=" + strconv.Itoa(i)
		}
		if r := document(f, keyApps, spec, &Request{Accept: accept}); r == nil || r.Status() != http.StatusOK {
			t.Fatalf("%q: %v", accept, r)
		}
	}
	if len(f.proto) != 1 || f.protoBytes != len(f.proto[spec.Hash]) {
		t.Errorf("%d renderings, %d bytes, want one", len(f.proto), f.protoBytes)
	}
	small := NewFront(nil, nil, FrontConfig{MaxProtoBytes: 1000})
	r := document(small, keyApps, spec, &Request{Accept: acceptProto})
	if len(r.Body()) <= 1000 || len(small.proto) != 0 || small.protoBytes != 0 {
		t.Errorf("over the cap: body %d bytes, %d kept (%d bytes)", len(r.Body()), len(small.proto), small.protoBytes)
	}
}

// BenchmarkOpenAPIProtobufRender: one protobuf rendering of the largest captured document (api/v1),
// what a request waits for when it asks for a document not rendered yet.
func BenchmarkOpenAPIProtobufRender(b *testing.B) {
	spec := specOf(openapitest.Doc(b, v136, keyCore), time.Now())
	b.ReportAllocs()
	for b.Loop() {
		f := NewFront(nil, nil, FrontConfig{})
		if _, err := f.Protobuf(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAPIDocument: the per-request cost of answering a merged document (the largest
// captured one, api/v1): the full answer in JSON and in protobuf (rendered once), and the 304.
func BenchmarkOpenAPIDocument(b *testing.B) {
	spec := specOf(openapitest.Doc(b, v136, keyCore), time.Now())
	f := NewFront(nil, nil, FrontConfig{})
	for _, c := range []struct {
		name string
		q    Request
		code int
	}{
		{"json", Request{Accept: "application/json", Query: "hash=" + spec.Hash}, 200},
		{"protobuf", Request{Accept: acceptProto, Query: "hash=" + spec.Hash}, 200},
		{"not-modified", Request{Accept: "application/json", IfNoneMatch: strconv.Quote(spec.Hash)}, 304},
		{"redirect", Request{Accept: "application/json", Query: "hash=ABC"}, 301},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := document(f, keyCore, spec, &c.q); r.Status() != c.code {
					b.Fatalf("%d", r.Status())
				}
			}
		})
	}
}
