package extproc

import (
	"maps"
	"slices"
	"sync"

	"k8s.io/kube-openapi/pkg/handler3"

	"github.com/skewgate/skewgate/discovery"
)

// maxProtoBytes bounds the protobuf renderings one Topology keeps (like maxCacheBytes): past it a
// rendering is made per request instead (still one at a time per document, see protobuf). The
// entries are keyed by the document's hash alone, never by an Accept header, so a client cannot grow
// the cache by varying it; they are only made for the Topology's merged documents.
const maxProtoBytes = 64 << 20

// frontOpenAPI serves one Topology's OpenAPI v3: its index and its merged documents.
//
// The protobuf form of a merged document is rendered in the response phase, for a request an
// apiserver authorized, or by the background warm. That is bounded: only the Topology's merged
// documents are rendered (nothing a client sends is), each at most once at a time (single flight),
// kept up to maxProtoBytes, and the warm renders every one of them anyway once per Topology version,
// so a request only renders a document earlier than the warm would. The limit: a document past the
// cap is rendered again by each authorized request that asks for it after the last rendering ended
// (one at a time), which costs CPU, never memory beyond one rendering per document.
type frontOpenAPI struct {
	t      *discovery.Topology
	merged map[string]*discovery.OpenAPISpec // key -> merged document
	render func([]byte) ([]byte, error)      // handler3.ToV3ProtoBinary; tests count and hold it
	warmed sync.Once

	mu         sync.Mutex
	proto      map[string][]byte     // document hash -> handler3.ToV3ProtoBinary(document)
	rendering  map[string]*rendering // document hash -> the rendering in flight, or ended and not collected
	protoBytes int
	maxBytes   int
}

// rendering is one protobuf rendering of a document: done is closed once b and err are set.
type rendering struct {
	done    chan struct{}
	b       []byte
	err     error
	waiters int // requests that joined it (under the frontOpenAPI's mu; tests read it)
}

func newFrontOpenAPI(t *discovery.Topology) *frontOpenAPI {
	f := &frontOpenAPI{t: t, render: handler3.ToV3ProtoBinary, proto: map[string][]byte{},
		rendering: map[string]*rendering{}, maxBytes: maxProtoBytes}
	if t != nil {
		f.merged = f.mergedSpecs()
	}
	return f
}

// openAPIFor returns the OpenAPI answers of t, built once per Topology version. A new version keeps
// the protobuf renderings of the documents it still serves (and joins those in flight), and renders
// the others in the background: rendering a large document takes tens to hundreds of milliseconds
// (api/v1: 76 ms in BenchmarkOpenAPIProtobufRender on 2 idle cores, a few times that under load),
// a good part of Envoy's ext_proc message timeout for the request that would wait for it.
// The background rendering starts once per stored version: requests racing on a new version all
// get the one perTopology stored.
func (s *Server) openAPIFor(t *discovery.Topology) *frontOpenAPI {
	f := s.frontOpenAPI.get(t, func(t *discovery.Topology) *frontOpenAPI {
		f := newFrontOpenAPI(t)
		if prev := s.frontOpenAPI.load(); prev != nil {
			prev.mu.Lock()
			for _, spec := range f.merged {
				if b, ok := prev.proto[spec.Hash]; ok {
					f.keepProto(spec.Hash, b)
				} else if r, ok := prev.rendering[spec.Hash]; ok {
					f.rendering[spec.Hash] = r
				}
			}
			prev.mu.Unlock()
		}
		return f
	})
	f.warmed.Do(func() {
		if len(f.merged) > 0 {
			// Stops once another Topology version is served.
			go f.warm(func() bool { return s.frontOpenAPI.load() == f })
		}
	})
	return f
}

// mergedSpecs lists the Topology's merged documents, by key.
func (f *frontOpenAPI) mergedSpecs() map[string]*discovery.OpenAPISpec {
	out := map[string]*discovery.OpenAPISpec{}
	for _, d := range f.t.OpenAPIDecisions() {
		if spec := f.t.OpenAPIMerged(d.Key); d.Action == discovery.ActionServe && spec != nil {
			out[d.Key] = spec
		}
	}
	return out
}

// warm renders the protobuf form of every merged document not rendered yet, one at a time, while
// current says the Topology is still the one served.
func (f *frontOpenAPI) warm(current func() bool) {
	for _, key := range slices.Sorted(maps.Keys(f.merged)) {
		if !current() {
			return
		}
		f.protobuf(f.merged[key])
	}
}

// keepProto records a rendering if the cap allows; the caller holds f.mu.
func (f *frontOpenAPI) keepProto(hash string, b []byte) {
	if _, ok := f.proto[hash]; !ok && f.protoBytes+len(b) <= f.maxBytes {
		f.proto[hash] = b
		f.protoBytes += len(b)
	}
}

// protobuf is the protobuf form of a merged document, rendered on first use as handler3 renders its
// own (lazily, once per document). A document is rendered at most once at a time: a request that
// finds its rendering in flight (another request's, the warm's, or the previous Topology's) waits
// for it rather than rendering too. Waiting never costs more than rendering would: the rendering
// in flight ends no later than a new one would, and N renderings at once on C cores take about N/C
// times as long each, so every waiter answers sooner than if it rendered itself. Not answering
// instead (leaving the request to the apiservers) would be no better: that is also what happens if
// a rendering outlasts Envoy's ext_proc message timeout (failure_mode_allow: Envoy ignores the
// processor for the rest of the request, ext_proc.cc Filter::onMessageTimeout in a 2026 main copy,
// test/dataplane/CONFORMANCE.md row 6, and its route table
// sends the request to the set that serves the document, xds/openapiroutes.go), and that set's
// document is not the one the front's index names.
func (f *frontOpenAPI) protobuf(spec *discovery.OpenAPISpec) ([]byte, error) {
	f.mu.Lock()
	if b, ok := f.proto[spec.Hash]; ok {
		f.mu.Unlock()
		return b, nil
	}
	r, inFlight := f.rendering[spec.Hash]
	if inFlight {
		r.waiters++
	} else {
		r = &rendering{done: make(chan struct{})}
		f.rendering[spec.Hash] = r
	}
	f.mu.Unlock()
	if !inFlight {
		func() {
			defer close(r.done)
			r.b, r.err = f.render(spec.JSON)
		}()
	}
	<-r.done
	f.mu.Lock()
	if f.rendering[spec.Hash] == r {
		delete(f.rendering, spec.Hash) // past the cap, the next request renders again
	}
	if r.err == nil {
		f.keepProto(spec.Hash, r.b)
	}
	f.mu.Unlock()
	return r.b, r.err
}
