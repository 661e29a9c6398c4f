package discovery

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// openAPIGroup is the upstreams that list one key with one hash.
type openAPIGroup struct {
	hash    string
	members bitset
	size    int
	version *utilversion.Version // the highest of the members; nil: none parsable
	ready   bool
	covered int // the most resource keys of the key's group-version one member serves
}

// compareVersions orders a before b when a is newer; an unparsable version (nil) is the oldest.
func compareVersions(a, b *utilversion.Version) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	case b.LessThan(a):
		return -1
	case a.LessThan(b):
		return 1
	}
	return 0
}

// compareGroups is the choice order of groups: the highest version, then the most members, then the
// smallest hash.
func compareGroups(a, b *openAPIGroup) int {
	if c := compareVersions(a.version, b.version); c != 0 {
		return c
	}
	if a.size != b.size {
		return b.size - a.size
	}
	return strings.Compare(a.hash, b.hash)
}

// openAPIGroupVersion returns the group-version an index key names: "api/<v>" (the core group) and
// "apis/<g>/<v>". Other keys ("version", "apis", "apis/<g>", "logs", ...) name none.
func openAPIGroupVersion(key string) (gv string, ok bool) {
	parts := strings.Split(key, "/")
	for _, p := range parts {
		if p == "" {
			return "", false
		}
	}
	switch {
	case len(parts) == 2 && parts[0] == "api":
		return "/" + parts[1], true
	case len(parts) == 3 && parts[0] == "apis":
		return parts[1] + "/" + parts[2], true
	}
	return "", false
}

// gvCoverage is, for one group-version of the merged discovery, who serves every one of its resource
// keys (subresources included) and how many of them each upstream serves.
type gvCoverage struct {
	all   bitset
	count []int
}

func coverageByGV(caps map[ResourceKey]*capability, n int) map[string]*gvCoverage {
	out := map[string]*gvCoverage{}
	for key, c := range caps {
		gv := key.Group + "/" + key.Version
		cov := out[gv]
		if cov == nil {
			cov = &gvCoverage{all: slices.Clone(c.servers), count: make([]int, n)}
			out[gv] = cov
		}
		for w := range cov.all {
			cov.all[w] &= c.servers[w]
		}
		for i := range n {
			if c.servers.has(i) {
				cov.count[i]++
			}
		}
	}
	return out
}

// buildOpenAPI decides every key of the proven upstreams' OpenAPI v3 indexes by the rule at the top of
// openapi.go, merges the documents of the keys nobody serves whole, and builds the front's index.
// facts are the proven upstreams in Build's order, caps the merged discovery's resource keys; setFor
// names a group of upstreams, recording it in Topology.Sets when it has several members.
func buildOpenAPI(now time.Time, facts []UpstreamFacts, caps map[ResourceKey]*capability, ready bitset, setFor func(bitset) SetID) openAPIView {
	n := len(facts)
	keys := map[string]bool{}
	versions := make([]*utilversion.Version, n)
	for i, f := range facts {
		versions[i], _ = utilversion.ParseGeneric(f.Version)
		if f.OpenAPI != nil {
			for k := range f.OpenAPI.Keys {
				keys[k] = true
			}
		}
	}
	if len(keys) == 0 {
		return openAPIView{}
	}
	b := &openAPIBuilder{now: now, facts: facts, versions: versions, coverage: coverageByGV(caps, n), ready: ready, setFor: setFor,
		aggregated: aggregatedOpenAPIKeys(facts)}
	view := &b.view
	view.decisions = make(map[string]OpenAPIDecision, len(keys))
	allDefault := true
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		d := b.decide(key)
		view.decisions[key] = d
		allDefault = allDefault && d.Action == ActionDefault
	}
	if !allDefault {
		view.index = openAPIIndexSpec(view.decisions, now)
	}
	return *view
}

// openAPIBuilder holds what deciding one key needs.
type openAPIBuilder struct {
	now      time.Time
	facts    []UpstreamFacts
	versions []*utilversion.Version // parsed Upstream.Version per fact; nil: unparsable
	coverage map[string]*gvCoverage
	ready    bitset
	setFor   func(bitset) SetID
	// aggregated: the keys of group-versions an aggregated APIService serves (routed only).
	aggregated map[string]bool
	view       openAPIView
}

// decide returns the decision for key, recording merged documents, wants and degraded keys in b.view.
func (b *openAPIBuilder) decide(key string) OpenAPIDecision {
	facts, versions, ready, view := b.facts, b.versions, b.ready, &b.view
	n := len(facts)
	var cov *gvCoverage
	if gv, ok := openAPIGroupVersion(key); ok {
		cov = b.coverage[gv] // nil: the group-version has no resources, every upstream listing it serves all
	}
	byHash := map[string]*openAPIGroup{}
	listing := 0
	for i, f := range facts {
		if f.OpenAPI == nil {
			continue
		}
		h, ok := f.OpenAPI.Keys[key]
		if !ok {
			continue
		}
		listing++
		g := byHash[h]
		if g == nil {
			g = &openAPIGroup{hash: h, members: newBitset(n)}
			byHash[h] = g
		}
		if g.size == 0 || compareVersions(versions[i], g.version) < 0 {
			g.version = versions[i]
		}
		g.members.set(i)
		g.size++
		g.ready = g.ready || ready.has(i)
		if cov != nil {
			g.covered = max(g.covered, cov.count[i])
		}
	}
	if listing == n && len(byHash) == 1 {
		for h := range byHash {
			return OpenAPIDecision{Action: ActionDefault, Hash: h}
		}
	}
	// Eligible: the members that serve every resource of the group-version, grouped by hash.
	var eligible []*openAPIGroup
	for _, g := range byHash {
		e := g
		if cov != nil {
			e = &openAPIGroup{hash: g.hash, members: newBitset(n), version: nil}
			for i := range n {
				if g.members.has(i) && cov.all.has(i) {
					if e.size == 0 || compareVersions(versions[i], e.version) < 0 {
						e.version = versions[i]
					}
					e.members.set(i)
					e.size++
					e.ready = e.ready || ready.has(i)
				}
			}
		}
		if e.size > 0 {
			eligible = append(eligible, e)
		}
	}
	if len(eligible) > 0 {
		slices.SortFunc(eligible, compareGroups)
		for _, g := range eligible {
			if g.ready {
				return OpenAPIDecision{Action: ActionRoute, Set: b.setFor(g.members), Hash: g.hash}
			}
		}
		// None of them is ready (a new apiserver starting, or stuck): as if none served it all. The
		// ready ones' documents, merged with the others' where they are held, beat a 503 for every
		// resource of the group-version; only with nobody ready the key is unavailable.
	}

	// Nobody serves the whole group-version: merge every group's document. The fallback (Envoy's route
	// when ext_proc is not there, and the route until the merge can be built) is the group serving the
	// most of the group-version's resources, then the newest, ready ones first.
	groups := slices.SortedFunc(maps.Values(byHash), compareGroups)
	fallback := slices.MinFunc(groups, func(a, b *openAPIGroup) int {
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
	})
	set := b.setFor(fallback.members)
	degraded := OpenAPIDecision{Action: ActionRoute, Set: set, Hash: fallback.hash}
	if !fallback.ready {
		degraded = OpenAPIDecision{Action: ActionUnavailable, Hash: fallback.hash}
	}
	if len(groups) == 1 {
		// One document: a merge adds nothing to it (the upstreams serving the rest do not list K, e.g.
		// their index is not known yet), so its own upstreams serve it under its own hash.
		return degraded
	}
	if why := b.routeOnly(key, groups); why != "" {
		if view.routed == nil {
			view.routed = map[string]string{}
		}
		view.routed[key] = why
		return degraded
	}
	inputs := make([]*OpenAPISpec, 0, len(groups))
	for _, g := range groups {
		doc := openAPIDocOf(key, g, facts)
		if doc == nil {
			// Ask every upstream of the group that lacks it; the next Build merges.
			for i := range n {
				if g.members.has(i) {
					if d := facts[i].OpenAPIDocs[key]; d == nil || d.Hash != g.hash {
						view.want(facts[i].Name, key)
					}
				}
			}
			continue
		}
		inputs = append(inputs, doc)
	}
	if len(inputs) < len(groups) {
		view.degrade(key, fmt.Sprintf("waiting for %d of %d documents", len(groups)-len(inputs), len(groups)))
		return degraded
	}
	merged, err := mergeOpenAPIMemo(key, inputs, b.now)
	if err != nil {
		view.degrade(key, err.Error())
		return degraded
	}
	if view.merged == nil {
		view.merged = map[string]*OpenAPISpec{}
	}
	view.merged[key] = merged
	return OpenAPIDecision{Action: ActionServe, Set: set, Hash: merged.Hash}
}

// openAPIDocOf returns the document of key under the group's hash that some member fetched, or nil.
func openAPIDocOf(key string, g *openAPIGroup, facts []UpstreamFacts) *OpenAPISpec {
	for i := range facts {
		if g.members.has(i) {
			if d := facts[i].OpenAPIDocs[key]; d != nil && d.Hash == g.hash {
				return d
			}
		}
	}
	return nil
}

func (v *openAPIView) want(upstream, key string) {
	if v.wants == nil {
		v.wants = map[string][]string{}
	}
	v.wants[upstream] = append(v.wants[upstream], key)
}

func (v *openAPIView) degrade(key, reason string) {
	if v.degraded == nil {
		v.degraded = map[string]string{}
	}
	v.degraded[key] = reason
}
