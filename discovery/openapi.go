package discovery

import (
	"slices"
	"strings"

	"github.com/skewgate/skewgate/openapi"
)

// OpenAPI v3 at the front: the openapi package decides per document key where /openapi/v3/<key>
// comes from (openapi.Decide, the rule in openapi/decision.go) and builds the front's index; a
// Topology carries its Result, each decision's upstreams as a SetID. Sets of several upstreams that
// a decision names join Topology.Sets, as resource decisions' do.

// OpenAPIIndex is one upstream's /openapi/v3 index: document key -> hash.
type OpenAPIIndex = openapi.Index

// OpenAPISpec is one OpenAPI v3 document as the front serves it.
type OpenAPISpec = openapi.Spec

// OpenAPIDecision is where the front takes the document of one key from.
type OpenAPIDecision struct {
	Action Action
	// Set: the upstreams to send the request to (ActionRoute), or, for ActionServe, the ones Envoy's
	// route table sends it to when ext_proc is not there (fail open).
	Set SetID
	// Hash is the hash the front's index names for the key.
	Hash string
}

// OpenAPIKeyDecision is a key and its decision, with why it is not merged at the front where it
// would need a merge (OpenAPIRoutedOnly, OpenAPIDegraded).
type OpenAPIKeyDecision struct {
	Key string `json:"key"`
	OpenAPIDecision
	Why string `json:"why,omitempty"`
}

// openAPIView is the part of a Topology about OpenAPI v3. The zero value passes everything through.
type openAPIView struct {
	index     *OpenAPISpec
	decisions map[string]OpenAPIDecision
	merged    map[string]*OpenAPISpec
	wants     map[string][]string
	degraded  map[string]string // key -> why its merged document is not served
	routed    map[string]string // key -> why it is never merged (openapi/aggregated.go)
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
			out = append(out, OpenAPIKeyDecision{Key: k, OpenAPIDecision: d, Why: t.openAPIWhy(k)})
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

// OpenAPIRoutedOnly returns, per key that would need a merge but may not be merged (openapi/aggregated.go),
// why: its decision routes to the fallback, and nothing is fetched or held for it.
func (t *Topology) OpenAPIRoutedOnly() map[string]string { return t.openapi.routed }

// openAPIWhy says why key, which needs a merge, is not served merged: routed only or degraded.
func (t *Topology) openAPIWhy(key string) string {
	if r := t.openapi.routed[key]; r != "" {
		return "routed only: " + r
	}
	if r := t.openapi.degraded[key]; r != "" {
		if strings.HasPrefix(r, openapi.Waiting+" ") {
			return "not merged yet: " + r // documents still to fetch
		}
		return "not merged: " + r // inputs that do not merge, until one of them changes
	}
	return ""
}

func sortKeyDecisions(ds []OpenAPIKeyDecision) {
	slices.SortFunc(ds, func(a, b OpenAPIKeyDecision) int { return strings.Compare(a.Key, b.Key) })
}
