package openapi

import (
	"context"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sync/singleflight"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/utils/clock"
)

// MaxProtoBytes bounds the protobuf renderings one Front keeps: past it a rendering is made per
// request instead (still one at a time per document, see Protobuf). The entries are keyed by the
// document's hash alone, never by an Accept header, so a client cannot grow the cache by varying
// it; they are only made for the Front's merged documents.
const MaxProtoBytes = 64 << 20

// Front serves one Topology's OpenAPI v3 at the front: its index and its merged documents, as
// handler3 serves its own (serve.go).
//
// The protobuf form of a merged document is rendered for a request an apiserver authorized, or by
// Warm. That is bounded: only the Front's merged documents are rendered (nothing a client sends is),
// each at most once at a time across this Front and the Fronts made from it (one singleflight group,
// keyed by the document's hash), kept up to MaxProtoBytes, and Warm renders every one of them anyway,
// so a request only renders a document earlier than Warm would. The limit: a document past the cap
// is rendered again by each authorized request that asks for it after the last rendering ended (one
// at a time), which costs CPU, never memory beyond one rendering per document.
type Front struct {
	merged map[string]*Spec // key -> merged document
	clock  clock.PassiveClock
	render func([]byte) ([]byte, error)
	onWait func(hash string)
	flight *singleflight.Group // shared with the Fronts made from this one

	mu         sync.Mutex
	proto      map[string][]byte // document hash -> its protobuf rendering
	protoBytes int
	maxBytes   int
}

// FrontConfig is what a Front needs; the zero value serves with the real clock and handler3's
// rendering.
type FrontConfig struct {
	Clock clock.PassiveClock
	// Render renders a document's protobuf form [handler3.ToV3ProtoBinary].
	Render func([]byte) ([]byte, error)
	// MaxProtoBytes bounds the renderings kept [MaxProtoBytes].
	MaxProtoBytes int
	// OnRenderWait, if set, is called when a request starts waiting for a rendering, its own or
	// one in flight, once that rendering is registered: whoever asks for it later joins it.
	OnRenderWait func(hash string)
}

// NewFront returns the Front of the merged documents (key -> document). prev, the Front of the
// previous Topology (nil: none), hands over its renderings of the documents still served and its
// renderings in flight, which the new Front joins instead of rendering again: rendering a large
// document takes tens to hundreds of milliseconds (api/v1: BenchmarkOpenAPIProtobufRender), a good
// part of Envoy's ext_proc message timeout for the request that would wait for it.
func NewFront(merged map[string]*Spec, prev *Front, cfg FrontConfig) *Front {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Render == nil {
		cfg.Render = handler3.ToV3ProtoBinary
	}
	if cfg.MaxProtoBytes == 0 {
		cfg.MaxProtoBytes = MaxProtoBytes
	}
	f := &Front{merged: merged, clock: cfg.Clock, render: cfg.Render, onWait: cfg.OnRenderWait, flight: &singleflight.Group{},
		proto: map[string][]byte{}, maxBytes: cfg.MaxProtoBytes}
	if prev != nil {
		f.flight = prev.flight
		prev.mu.Lock()
		for _, spec := range merged {
			if b, ok := prev.proto[spec.Hash]; ok {
				f.keepProtoLocked(spec.Hash, b)
			}
		}
		prev.mu.Unlock()
	}
	return f
}

// Merged returns the merged document of key, or nil.
func (f *Front) Merged(key string) *Spec { return f.merged[key] }

// Warm renders the protobuf form of every merged document not rendered yet, one at a time, until
// ctx ends or current says the Front is no longer the one served.
func (f *Front) Warm(ctx context.Context, current func() bool) {
	for _, key := range slices.Sorted(maps.Keys(f.merged)) {
		if ctx.Err() != nil || !current() {
			return
		}
		f.Protobuf(f.merged[key])
	}
}

// keepProtoLocked records a rendering if the cap allows; the caller holds f.mu.
func (f *Front) keepProtoLocked(hash string, b []byte) {
	if _, ok := f.proto[hash]; !ok && f.protoBytes+len(b) <= f.maxBytes {
		f.proto[hash] = b
		f.protoBytes += len(b)
	}
}

// Protobuf is the protobuf form of a merged document, rendered on first use as handler3 renders its
// own (lazily, once per document). A document is rendered at most once at a time: a request that
// finds its rendering in flight (another request's, Warm's, or the previous Front's) waits for it
// rather than rendering too. Waiting never costs more than rendering would: the rendering in flight
// ends no later than a new one would, and N renderings at once on C cores take about N/C times as
// long each, so every waiter answers sooner than if it rendered itself. Not answering instead
// (leaving the request to the apiservers) would be no better: that is also what happens if a
// rendering outlasts Envoy's ext_proc message timeout (failure_mode_allow: Envoy ignores the
// processor for the rest of the request, ext_proc.cc Filter::onMessageTimeout in a 2026 main copy,
// test/dataplane/CONFORMANCE.md row 6, and its route table sends the request to the set that serves
// the document, xds/openapiroutes.go), and that set's document is not the one the front's index
// names.
func (f *Front) Protobuf(spec *Spec) ([]byte, error) {
	f.mu.Lock()
	if b, ok := f.proto[spec.Hash]; ok {
		f.mu.Unlock()
		return b, nil
	}
	// Registered under f.mu: a request of this Front that finds no rendering kept joins this one,
	// and the rendering is kept before the flight ends.
	ch := f.flight.DoChan(spec.Hash, func() (any, error) {
		b, err := f.render(spec.JSON)
		if err == nil {
			f.mu.Lock()
			f.keepProtoLocked(spec.Hash, b)
			f.mu.Unlock()
		}
		return b, err
	})
	f.mu.Unlock()
	if f.onWait != nil {
		f.onWait(spec.Hash)
	}
	r := <-ch
	if r.Err != nil {
		return nil, r.Err
	}
	b := r.Val.([]byte)
	f.mu.Lock()
	f.keepProtoLocked(spec.Hash, b) // a rendering another Front led; past the cap, the next request renders again
	f.mu.Unlock()
	return b, nil
}
