package openapi

import (
	"maps"
	"slices"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/kube-openapi/pkg/handler3"

	"github.com/skewgate/skewgate/internal/kubeversion"
)

// The decision rule. Every apiserver publishes an index, /openapi/v3, that names one document per
// key ("api/v1", "apis/<group>/<version>", and a few others such as "version") by a hash of the
// document: /openapi/v3/<key>?hash=<H>. During a skew the apiservers' documents differ, and so do
// their hashes. The front decides per key where the document comes from, and builds its own index
// naming exactly those documents by their hashes, so a client that reads the front's index and then
// the documents it names always gets the documents, never a redirect to another apiserver's.
//
// Per key K, over the proven upstreams (one whose index is not known yet lists nothing):
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
//     merged from the documents of every hash (Result.Merged, rule in merge.go), with Members the
//     fallback for Envoy's route table: the group serving the most of those resources (ready ones
//     first, then the order above). Until the merged document can be built (documents not fetched
//     yet: Result.Wants names, per upstream, the keys to fetch, only for hashes no upstream has
//     fetched; inputs that do not merge: Result.Degraded), the decision is ActionRoute to that
//     fallback with its hash (ActionUnavailable if none of it is ready). When the upstreams listing
//     K all publish one hash, a merge would add nothing: ActionRoute to them, nothing fetched. Nor is
//     K merged when an aggregated APIService serves its group-version or one of its hashes is not
//     a SHA-512 (aggregated.go): ActionRoute to that fallback, never the front's own bytes.
//
// The front's index names every key with its decision's Hash; it is nil (pass the request through)
// when every decision is ActionDefault: all upstreams publish the same index.

// Action is what the front does with a request for one document key.
type Action uint8

const (
	ActionDefault     Action = iota // any apiserver serves it
	ActionRoute                     // the upstreams of Decision.Members serve it
	ActionUnavailable               // the upstreams that serve it are not ready: 503
	ActionServe                     // the front serves Result.Merged[key]
)

// Members is a set of upstream indexes (into Decide's upstreams), 64 to a word.
type Members []uint64

// NewMembers returns an empty set for n upstreams.
func NewMembers(n int) Members { return make(Members, (n+63)/64) }

// Add adds upstream i.
func (m Members) Add(i int) { m[i/64] |= 1 << (i % 64) }

// Has reports whether upstream i is in the set.
func (m Members) Has(i int) bool { return m[i/64]&(1<<(i%64)) != 0 }

// Decision is where the front takes the document of one key from.
type Decision struct {
	Action Action
	// Members: the upstreams to send the request to (ActionRoute), or, for ActionServe, the ones
	// Envoy's route table sends it to when ext_proc is not there (fail open). Nil otherwise.
	Members Members
	// Hash is the hash the front's index names for the key.
	Hash string
}

// Upstream is one proven upstream as the rule sees it.
type Upstream struct {
	Name    string
	Version *utilversion.Version // nil: unparsable, the oldest
	Ready   bool
	Index   *Index           // nil until fetched once: lists nothing
	Docs    map[string]*Spec // the documents held for it, by key
	// Aggregated are the group-versions ("<group>/<version>") it proxies to an aggregated API
	// server; AllAggregated stands for every one (not known yet).
	Aggregated []string
}

// Coverage is, per group-version of the merged discovery ("<group>/<version>", "/<version>" for
// the core group, as GroupVersion names it), who serves its resource keys.
type Coverage map[string]*GVCoverage

// GVCoverage: All are the upstreams that serve every resource key of the group-version
// (subresources included), Count[i] how many of them upstream i serves.
type GVCoverage struct {
	All   Members
	Count []int
}

// Result is every key's decision, and what the front serves and needs for them.
type Result struct {
	Decisions map[string]Decision
	// Index is the front's /openapi/v3, nil when every decision is ActionDefault.
	Index *Spec
	// Merged are the merged documents of the keys decided ActionServe.
	Merged map[string]*Spec
	// Wants names, per upstream, the keys whose documents a merge needs and Decide did not have.
	Wants map[string][]string
	// Degraded: per key that needs a merged document not served yet, why.
	Degraded map[string]string
	// Routed: per key that would need a merge but may not be merged, why.
	Routed map[string]string
}

// Decide decides every key the upstreams' indexes list by the rule above, merges (through memo,
// which may be nil) the documents of the keys nobody serves whole, and builds the front's index.
// It reads nothing but its arguments: the same arguments give the same Result.
func Decide(now time.Time, ups []Upstream, cov Coverage, memo *Memo) Result {
	keys := map[string]bool{}
	for _, u := range ups {
		if u.Index != nil {
			for k := range u.Index.Keys {
				keys[k] = true
			}
		}
	}
	if len(keys) == 0 {
		return Result{}
	}
	d := &decider{now: now, ups: ups, coverage: cov, memo: memo, aggregated: aggregatedKeys(ups)}
	d.res.Decisions = make(map[string]Decision, len(keys))
	allDefault := true
	// In key order: Wants lists each upstream's keys sorted.
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		dec := d.decide(key)
		d.res.Decisions[key] = dec
		allDefault = allDefault && dec.Action == ActionDefault
	}
	if !allDefault {
		paths := make(map[string]handler3.OpenAPIV3DiscoveryGroupVersion, len(d.res.Decisions))
		for k, dec := range d.res.Decisions {
			paths[k] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: DocumentURL(k, dec.Hash)}
		}
		d.res.Index = indexDocument(paths, now)
	}
	return d.res
}

// group is the upstreams that list one key with one hash.
type group struct {
	hash    string
	members Members
	size    int
	version *utilversion.Version // the highest of the members; nil: none parsable
	ready   bool
	covered int // the most resource keys of the key's group-version one member serves
}

func (g *group) add(i int, u *Upstream) {
	if g.size == 0 || kubeversion.NewerFirst(u.Version, g.version) < 0 {
		g.version = u.Version
	}
	g.members.Add(i)
	g.size++
	g.ready = g.ready || u.Ready
}

// compareGroups is the choice order of groups: the highest version, then the most members, then the
// smallest hash.
func compareGroups(a, b *group) int {
	if c := kubeversion.NewerFirst(a.version, b.version); c != 0 {
		return c
	}
	if a.size != b.size {
		return b.size - a.size
	}
	return strings.Compare(a.hash, b.hash)
}

// compareFallback is the choice order of a merge's fallback: ready groups first, then the one
// serving the most of the group-version's resources, then compareGroups.
func compareFallback(a, b *group) int {
	if a.ready != b.ready {
		if a.ready {
			return -1
		}
		return 1
	}
	if a.covered != b.covered {
		return b.covered - a.covered
	}
	return compareGroups(a, b)
}
