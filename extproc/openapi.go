package extproc

import (
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
)

// OpenAPI v3 at the front. The Topology decides per document key where /openapi/v3/<key> comes from
// (a row of its decision table, decision.PathOpenAPIDocument) and publishes an index naming exactly those documents by their
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
//   - ActionDefault, and a key no upstream lists: as any other schema request (the schemas row).
//
// The key is read from the path as handler3 reads it (decision.OpenAPIPath).

const openAPIV3Path = decision.OpenAPIV3Path

// OpenAPI kinds (label values of skewgate_extproc_openapi_responses_total).
const (
	OpenAPIIndex    = "index"    // GET /openapi/v3
	OpenAPIDocument = "document" // GET /openapi/v3/<key> of a key the front merges
)

// serveOpenAPIIndex lets GET /openapi/v3 go on to any apiserver (every one authorizes it as any
// other), and answers it with the front's index once that apiserver authorized it.
func (s *Server) serveOpenAPIIndex(r *headersRead, t *discovery.Topology, a decision.Answer) (string, *extprocv3.ProcessingResponse, *pending) {
	spec := t.OpenAPIIndex()
	resp := s.continueWith(a.Cluster)
	resp.ModeOverride = discoveryMode
	f := s.openAPIFor(t)
	// What the answer depends on is read in the response phase only (pending).
	headers, query := r.answer, a.Query
	return OutcomeOpenAPI, resp, &pending{answer: func() *extprocv3.ProcessingResponse {
		return f.index(spec, headers.openAPIRequest(query))
	}, openAPI: OpenAPIIndex}
}

// serveOpenAPIDocument sends a GET of a merged document to the set Envoy's route table names for the
// key, and answers it with the merged document once an apiserver of that set authorized it.
func (s *Server) serveOpenAPIDocument(r *headersRead, t *discovery.Topology, req decision.Request, a decision.Answer) (string, *extprocv3.ProcessingResponse, *pending) {
	key, spec := a.Doc, t.OpenAPIMerged(a.Doc)
	f := s.openAPIFor(t)
	// Without the front's answer (nothing acceptable, or ext_proc gone in the response phase) the
	// client gets that set's own document, as when ext_proc is down. The cluster is in every Envoy:
	// t is the acknowledged Topology (TopologySource).
	resp := s.continueWith(a.Cluster)
	resp.ModeOverride = discoveryMode
	headers, query := r.answer, a.Query
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
	}
}
