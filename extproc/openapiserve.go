package extproc

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/openapi"
)

// The front's OpenAPI v3 answers are openapi.Front's (handler3's semantics, protobuf renderings),
// recorded and sent as an ImmediateResponse. All of it runs only in the response phase, for a
// request an apiserver authorized (discoveryauth.go), within a serving slot (frontlimit.go).

// WithContext bounds the work the Server starts on its own (the background protobuf renderings of
// each new Topology's merged documents): it ends with ctx [context.Background()].
func WithContext(ctx context.Context) Option { return func(s *Server) { s.ctx = ctx } }

// frontOpenAPI serves one Topology's OpenAPI v3.
type frontOpenAPI struct {
	t *discovery.Topology
	*openapi.Front
	warmed sync.Once
}

// mergedSpecs lists the Topology's merged documents, by key.
func mergedSpecs(t *discovery.Topology) map[string]*discovery.OpenAPISpec {
	out := map[string]*discovery.OpenAPISpec{}
	if t == nil {
		return out
	}
	for _, d := range t.OpenAPIDecisions() {
		if spec := t.OpenAPIMerged(d.Key); d.Action == discovery.ActionServe && spec != nil {
			out[d.Key] = spec
		}
	}
	return out
}

func newFrontOpenAPI(t *discovery.Topology, prev *frontOpenAPI, cfg openapi.FrontConfig) *frontOpenAPI {
	var p *openapi.Front
	if prev != nil {
		p = prev.Front
	}
	return &frontOpenAPI{t: t, Front: openapi.NewFront(mergedSpecs(t), p, cfg)}
}

// openAPIFor returns the OpenAPI answers of t, built once per Topology version: a new version keeps
// the protobuf renderings of the documents it still serves (and joins those in flight), and renders
// the others in the background (openapi.Front.Warm), once per stored version, until the Server's
// context ends or another version is served. Requests racing on a new version all get the one
// perTopology stored.
func (s *Server) openAPIFor(t *discovery.Topology) *frontOpenAPI {
	f := s.frontOpenAPI.get(t, func(t *discovery.Topology) *frontOpenAPI {
		return newFrontOpenAPI(t, s.frontOpenAPI.load(), s.openAPIConfig)
	})
	f.warmed.Do(func() {
		if len(mergedSpecs(t)) == 0 {
			return
		}
		ctx := s.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		go f.Warm(ctx, func() bool { return s.frontOpenAPI.load() == f })
	})
	return f
}

// index answers GET /openapi/v3 with the front's index.
func (f *frontOpenAPI) index(spec *discovery.OpenAPISpec, q *openAPIRequest) *extprocv3.ProcessingResponse {
	w := openapi.NewRecorder()
	f.ServeIndex(w, spec, q.request())
	return recorded(w)
}

// document answers GET /openapi/v3/<key> with the merged document, or nil when the apiserver's own
// answer is the same (nothing acceptable).
func (f *frontOpenAPI) document(key string, spec *discovery.OpenAPISpec, q *openAPIRequest) *extprocv3.ProcessingResponse {
	return f.renderedDocument(key, spec, q, nil)
}

// renderedDocument is document with the protobuf form already rendered, if rendered is not nil.
func (f *frontOpenAPI) renderedDocument(key string, spec *discovery.OpenAPISpec, q *openAPIRequest, rendered []byte) *extprocv3.ProcessingResponse {
	w := openapi.NewRecorder()
	if !f.ServeDocument(w, key, spec, q.request(), rendered) {
		return nil
	}
	return recorded(w)
}

// openAPIRequest is what an OpenAPI answer depends on in a request.
type openAPIRequest struct {
	query                                    string // raw query
	accept                                   string
	ifNoneMatch, ifModifiedSince             string
	ifMatch, ifUnmodifiedSince, rang, ifRang string
}

func (q *openAPIRequest) request() *openapi.Request {
	return &openapi.Request{Query: q.query, Accept: q.accept, IfNoneMatch: q.ifNoneMatch, IfModifiedSince: q.ifModifiedSince,
		IfMatch: q.ifMatch, IfUnmodifiedSince: q.ifUnmodifiedSince, Range: q.rang, IfRange: q.ifRang}
}

// recorded is the recorded answer as an ImmediateResponse. Content-Length is left to Envoy, which
// sets it for the body of a local reply.
func recorded(w *openapi.Recorder) *extprocv3.ProcessingResponse {
	keys := slices.Sorted(maps.Keys(w.Header()))
	set := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, k := range keys {
		if k == "Content-Length" {
			continue
		}
		// The first value replaces (a client cannot have put one there: these are response
		// headers of a local reply), the others are appended.
		for i, v := range w.Header()[k] {
			set = append(set, setHeader(strings.ToLower(k), v, i > 0))
		}
	}
	return immediateResponse(w.Status(), set, w.Body(), "skewgate_openapi")
}
