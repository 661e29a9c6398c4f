// Package openapi is OpenAPI v3 at the front: what an apiserver's /openapi/v3 index and documents
// are (Index, Spec, handler3's URLs and hashes), fetching and checking them (FetchIndex,
// FetchDocument), the merge of one key's documents (Merge, and Memo, which keeps recent merges),
// the decision rule (Decide: which upstreams serve /openapi/v3/<key>, or which merged document the
// front serves) and handler3-style serving of the front's index and merged documents (Front).
//
// It owns no global state: a Memo, a Store and a Front are instances their owner creates (the
// discovery Controller owns its Memo and Store, each ext_proc Server its Fronts). It never decides
// a resource request, never builds Envoy config and knows nothing of ext_proc: discovery, xds and
// extproc call it and translate its answers.
package openapi
