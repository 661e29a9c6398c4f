package discovery

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
)

// OpenAPI v3 at the front. Every apiserver publishes an index, /openapi/v3, that names one document
// per key ("api/v1", "apis/<group>/<version>", and a few others such as "version") by a hash of the
// document: /openapi/v3/<key>?hash=<H>. During a skew the apiservers' documents differ, and so do
// their hashes. The front decides per key where the document comes from, and builds its own index
// naming exactly those documents by their hashes, so a client that reads the front's index and then
// the documents it names always gets the documents, never a redirect to another apiserver's.
//
// Per key K (see DecideOpenAPI), over the proven upstreams (one whose index is not known yet lists
// nothing):
//   - every proven upstream lists K with one hash: ActionDefault (any apiserver serves it);
//   - else the upstreams that list K and serve every resource of K's group-version in the merged
//     discovery (every resource and subresource key; a key that names no group-version, such as
//     "version", "apis" or "apis/<group>", has no resources, so every upstream listing it
//     qualifies), grouped by their hash for K: ActionRoute to the first group with a ready member,
//     in the order highest version (k8s.io/apimachinery's ParseGeneric of Upstream.Version, an
//     unparsable one the lowest), then the most members, then the smallest hash;
//   - nobody serves every resource of the group-version, or none of those who do is ready (a new
//     apiserver starting: a document from the ready ones beats a 503 for every resource of the
//     group-version): ActionServe, the front serves a document
//     merged from the documents of every hash (OpenAPIMerged, rule in openapimerge.go), with Set the
//     fallback for Envoy's route table: the group serving the most of those resources (ready ones
//     first, then the order above). Until the merged document can be built (documents not fetched
//     yet: OpenAPIWants names, per upstream, the keys to fetch, only for hashes no upstream has
//     fetched; inputs that do not merge: OpenAPIDegraded), the decision is ActionRoute to that
//     fallback with its hash (ActionUnavailable if none of it is ready). When the upstreams listing
//     K all publish one hash, a merge would add nothing: ActionRoute to them, nothing fetched. Nor is
//     K merged when an aggregated APIService serves its group-version or one of its hashes is not
//     a SHA-512 (openapiremote.go): ActionRoute to that fallback, never the front's own bytes.
//
// Sets of several upstreams that a decision names join Topology.Sets, as resource decisions' do.
// The front's index names every key with its decision's Hash; it is nil (pass the request through)
// when every decision is ActionDefault: all upstreams publish the same index.

// OpenAPIIndex is one upstream's /openapi/v3 index: document key -> hash.
type OpenAPIIndex struct {
	Keys map[string]string
	// Hash identifies the raw body (SHA-256 hex): equal hashes mean identical indexes.
	Hash string
}

// OpenAPISpec is one OpenAPI v3 document as the front serves it.
type OpenAPISpec struct {
	JSON []byte
	// Hash is what kube-openapi's handler3 computes (computeETag): the SHA-512 of JSON in upper-case
	// hex. It is the document's ETag and the ?hash= of its URL in the index.
	Hash string
	// Built is when the document was made: its Last-Modified.
	Built time.Time
}

// OpenAPIDecision is where the front takes the document of one key from.
type OpenAPIDecision struct {
	Action Action
	// Set: the upstreams to send the request to (ActionRoute), or, for ActionServe, the ones Envoy's
	// route table sends it to when ext_proc is not there (fail open).
	Set SetID
	// Hash is the hash the front's index names for the key.
	Hash string
}

// OpenAPIKeyDecision is a key and its decision.
type OpenAPIKeyDecision struct {
	Key string `json:"key"`
	OpenAPIDecision
}

// openAPIView is the part of a Topology about OpenAPI v3. The zero value passes everything through.
type openAPIView struct {
	index     *OpenAPISpec
	decisions map[string]OpenAPIDecision
	merged    map[string]*OpenAPISpec
	wants     map[string][]string
	degraded  map[string]string // key -> why its merged document is not served
	routed    map[string]string // key -> why it is never merged (openapiremote.go)
}

// OpenAPIIndex returns the index the front serves at /openapi/v3, nil when the front passes the
// request through (every upstream publishes the same index, or none is known).
func (t *Topology) OpenAPIIndex() *OpenAPISpec { return t.openapi.index }

// DecideOpenAPI returns the decision for the document at /openapi/v3/<key> (key as kube-openapi's
// handler3 takes it: the decoded path after "/openapi/v3/"). A key no upstream lists gets
// ActionDefault.
func (t *Topology) DecideOpenAPI(key string) OpenAPIDecision { return t.openapi.decisions[key] }

// OpenAPIMerged returns the merged document of a key decided ActionServe, else nil.
func (t *Topology) OpenAPIMerged(key string) *OpenAPISpec { return t.openapi.merged[key] }

// OpenAPIDecisions lists every key whose decision is not ActionDefault, sorted by key.
func (t *Topology) OpenAPIDecisions() []OpenAPIKeyDecision {
	var out []OpenAPIKeyDecision
	for k, d := range t.openapi.decisions {
		if d.Action != ActionDefault {
			out = append(out, OpenAPIKeyDecision{Key: k, OpenAPIDecision: d})
		}
	}
	sortKeyDecisions(out)
	return out
}

// OpenAPIWants returns, per upstream name, the keys whose documents a merge needs and the Build did
// not have: the controller fetches them and builds again.
func (t *Topology) OpenAPIWants() map[string][]string { return t.openapi.wants }

// OpenAPIDegraded returns, per key that needs a merged document the front does not serve yet (its
// decision routes to the fallback), the reason: documents still to fetch, or inputs that do not merge.
func (t *Topology) OpenAPIDegraded() map[string]string { return t.openapi.degraded }

// OpenAPIRoutedOnly returns, per key that would need a merge but may not be merged (openapiremote.go),
// why: its decision routes to the fallback, and nothing is fetched or held for it.
func (t *Topology) OpenAPIRoutedOnly() map[string]string { return t.openapi.routed }

func sortKeyDecisions(ds []OpenAPIKeyDecision) {
	slices.SortFunc(ds, func(a, b OpenAPIKeyDecision) int { return strings.Compare(a.Key, b.Key) })
}

// openAPIIndexSpec is the front's /openapi/v3 index, made exactly as kube-openapi's handler3 makes its
// own (OpenAPIService.buildDiscoveryCacheLocked): json.Marshal of OpenAPIV3Discovery, one URL per
// key naming the document by the hash the decision gives.
func openAPIIndexSpec(decisions map[string]OpenAPIDecision, now time.Time) *OpenAPISpec {
	index := handler3.OpenAPIV3Discovery{Paths: make(map[string]handler3.OpenAPIV3DiscoveryGroupVersion, len(decisions))}
	for key, d := range decisions {
		index.Paths[key] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: openAPIDocumentURL(key, d.Hash)}
	}
	data, err := json.Marshal(index)
	if err != nil {
		panic(fmt.Sprintf("discovery: marshal OpenAPI index: %v", err)) // strings only: cannot fail
	}
	return &OpenAPISpec{JSON: data, Hash: openAPIHash(data), Built: now}
}

// openAPIDocumentURL is kube-openapi handler3's constructServerRelativeURL: the URL of the document of
// key under hash, as an index names it.
func openAPIDocumentURL(key, hash string) string {
	u := url.URL{Path: path.Join("/openapi/v3", key)}
	query := url.Values{}
	query.Set("hash", hash)
	u.RawQuery = query.Encode()
	return u.String()
}

// openAPIHash is kube-openapi handler3's computeETag: SHA-512 in upper-case hex.
func openAPIHash(data []byte) string { return fmt.Sprintf("%X", sha512.Sum512(data)) }
