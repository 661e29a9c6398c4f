package extproc

import (
	"fmt"
	"net/http"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/openapi"
)

// OpenAPI v3 at the front. The Topology decides per document key where /openapi/v3/<key> comes from
// (discovery.Topology.DecideOpenAPI) and publishes an index naming exactly those documents by their
// hashes (OpenAPIIndex):
//
//   - the index, GET /openapi/v3: the front's index, built once an apiserver authorized the request
//     (discoveryauth.go); no index (every apiserver publishes the same one): the apiserver answers.
//   - ActionRoute: to the cluster of the set that publishes the document under the index's hash.
//   - ActionUnavailable: 503 with Retry-After, as for a resource.
//   - ActionServe: GET gets the merged document (OpenAPIMerged), negotiated and built once an
//     apiserver of the decision's set authorized the request (nothing acceptable: that apiserver's
//     answer passes); other methods go to that set, as Envoy's route table sends them all when
//     ext_proc is not there (xds/openapiroutes.go).
//   - ActionDefault, and a key no upstream lists: as any other schema request (schemas.go).
//
// The key is the path after "/openapi/v3/" exactly as handler3 takes it (strings.SplitAfterN(path,
// "/", 4)[3] of the decoded path; no cleaning, so a trailing slash is another key). A path with a
// percent-escape or a fragment is left to the schema routing: the decoded key would differ from the
// bytes Envoy's exact path routes compare (they compare the path as normalized, escapes kept).

// openAPIPath splits a request path into an OpenAPI v3 key and the raw query. index: the path is
// /openapi/v3 itself. ok false: not an OpenAPI v3 path the front decides.
func openAPIPath(rawPath string) (key, query string, index, ok bool) {
	p, query, _ := strings.Cut(rawPath, "?")
	if strings.ContainsAny(p, "%#") {
		return "", "", false, false
	}
	if p == openapi.Prefix {
		return "", query, true, true
	}
	key, found := strings.CutPrefix(p, openapi.Prefix+"/")
	if !found || key == "" {
		return "", "", false, false
	}
	return key, query, false, true
}

// OpenAPI kinds (label values of skewgate_extproc_openapi_responses_total).
const (
	OpenAPIIndex    = "index"    // GET /openapi/v3
	OpenAPIDocument = "document" // GET /openapi/v3/<key> of a key the front merges
)

// decideOpenAPI decides an OpenAPI v3 request; handled false leaves it to the schema routing.
func (s *Server) decideOpenAPI(r *headersRead, t *discovery.Topology, c Request, anonymous bool) (outcome string, resp *extprocv3.ProcessingResponse, p *pending, handled bool) {
	key, query, index, ok := openAPIPath(r.path)
	if !ok {
		return "", nil, nil, false
	}
	// What the answer depends on is read in the response phase only (pending).
	headers := r.answer
	if index {
		spec := t.OpenAPIIndex()
		if spec == nil || r.method != http.MethodGet {
			return "", nil, nil, false
		}
		// Any apiserver authorizes /openapi/v3 as every other: the default cluster asks.
		resp := s.continueWith(r.target(wire.AllCluster, anonymous))
		resp.ModeOverride = discoveryMode
		f := s.openAPIFor(t)
		return OutcomeOpenAPI, resp, &pending{answer: func() *extprocv3.ProcessingResponse {
			return f.index(spec, headers.openAPIRequest(query))
		}, openAPI: OpenAPIIndex}, true
	}
	d := t.DecideOpenAPI(key)
	route := discovery.Decision{Action: discovery.ActionRoute, Set: d.Set}
	switch d.Action {
	case discovery.ActionRoute:
		o, resp, _ := s.routeTo(r, t, c, route, anonymous)
		return o, resp, nil, true
	case discovery.ActionUnavailable:
		return OutcomeUnavailable, immediate(http.StatusServiceUnavailable, string(metav1.StatusReasonServiceUnavailable),
			fmt.Sprintf("no apiserver that serves the OpenAPI document %s is available, retry later", key)), nil, true
	case discovery.ActionServe:
		spec := t.OpenAPIMerged(key)
		if spec == nil || r.method != http.MethodGet {
			o, resp, _ := s.routeTo(r, t, c, route, anonymous)
			return o, resp, nil, true
		}
		f := s.openAPIFor(t)
		// The request goes to the set Envoy's route table names for the key: without the front's
		// answer (nothing acceptable, or ext_proc gone in the response phase) the client gets that
		// set's own document, as when ext_proc is down.
		resp := s.continueWith(r.target(s.clustersFor(t).of(d.Set), anonymous))
		resp.ModeOverride = discoveryMode
		var q *openAPIRequest
		var rendered []byte
		return OutcomeOpenAPI, resp, &pending{
			// A protobuf rendering is waited for outside the serving slots: it is bounded on its
			// own (one at a time per document), and a slot held while waiting would serve nobody.
			// An Accept that does not name protobuf cannot negotiate it.
			prepare: func() {
				q = headers.openAPIRequest(query)
				if strings.Contains(strings.ToLower(q.accept), "protobuf") {
					rendered, _ = f.Protobuf(spec)
				}
			},
			answer:  func() *extprocv3.ProcessingResponse { return f.renderedDocument(key, spec, q, rendered) },
			openAPI: OpenAPIDocument,
		}, true
	}
	return "", nil, nil, false
}
