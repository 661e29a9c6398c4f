package discovery

import (
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/openapi"
)

// Document is one fetched aggregated discovery document (/api or /apis) of one upstream.
type Document struct {
	Groups []apidiscoveryv2.APIGroupDiscovery
	// Hash identifies the raw body: equal hashes mean identical documents, so a merge over many
	// upstreams of one version does the work once.
	Hash string
}

// UpstreamFacts is everything known about one upstream when a Topology is built.
type UpstreamFacts struct {
	Upstream // Capabilities and Resources are filled in by Build
	// API and APIs are nil until discovery was fetched once.
	API, APIs *Document
	// OpenAPI is the upstream's /openapi/v3 index, nil until fetched once.
	OpenAPI *OpenAPIIndex
	// OpenAPIDocs are the upstream's documents the last Topology wanted (OpenAPIWants), by key.
	OpenAPIDocs map[string]*OpenAPISpec
	// AggregatedAPIs are the group-versions ("<group>/<version>", sorted) the upstream proxies to an
	// aggregated API server (an APIService naming a service): their OpenAPI is routed, never merged.
	AggregatedAPIs []string
	// Departed marks an upstream that left (its Lease was deleted or went stale) recently. It is in no
	// cluster and not in the merged discovery, but the resources that only it served answer 503
	// instead of 404 until it is forgotten: objects of those types still exist in etcd, and a 404 for
	// them would tell the garbage collector they are gone.
	Departed bool
}

// standardVerbs are the verbs aggregated discovery lists; each gets its own capable set per key.
var standardVerbs = [...]string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

func verbIndex(v string) int {
	for i, s := range standardVerbs {
		if s == v {
			return i
		}
	}
	return -1
}

// bitset is a set of upstream indexes.
type bitset []uint64

func newBitset(n int) bitset         { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)           { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool      { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) equal(o bitset) bool { return slices.Equal(b, o) }
func (b bitset) key() string         { return string(bitsetBytes(b)) }
func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}
func (b bitset) intersects(o bitset) bool {
	for i := range b {
		if b[i]&o[i] != 0 {
			return true
		}
	}
	return false
}

func bitsetBytes(b bitset) []byte {
	out := make([]byte, 0, len(b)*8)
	for _, w := range b {
		for s := 0; s < 64; s += 8 {
			out = append(out, byte(w>>s))
		}
	}
	return out
}

// capability accumulates, for one resource key, which upstreams serve it and with which verbs.
type capability struct {
	servers bitset
	verbs   [len(standardVerbs)]bitset
}

// Build makes a Topology from facts. It is a pure function: the same facts give the same Topology
// (but for Version and Generated).
func Build(version string, now time.Time, facts []UpstreamFacts) *Topology {
	return build(version, now, facts, nil)
}

// build is Build merging OpenAPI documents through memo (the Controller's; nil: merge every time),
// which changes no byte of the Topology, only what a merge costs.
func build(version string, now time.Time, facts []UpstreamFacts, memo *openapi.Memo) *Topology {
	var departed []UpstreamFacts
	facts = slices.DeleteFunc(slices.Clone(facts), func(f UpstreamFacts) bool {
		if f.Departed {
			departed = append(departed, f)
		}
		return f.Departed
	})
	slices.SortFunc(facts, func(a, b UpstreamFacts) int { return strings.Compare(a.Name, b.Name) })
	t := &Topology{Version: version, Generated: now, routes: map[ResourceKey]route{}}
	// An upstream is given to Envoy only once it proved to be an apiserver: its discovery was fetched
	// over verified TLS and parsed as a valid document. Before that it has no cluster, so a Lease that
	// points at any other address makes Envoy open no connection at all.
	facts = slices.DeleteFunc(facts, func(f UpstreamFacts) bool {
		if f.APIs != nil || f.API != nil {
			return false
		}
		u := f.Upstream
		u.Capabilities, u.Resources = false, 0
		t.Unproven = append(t.Unproven, u)
		return true
	})
	n := len(facts)
	t.Upstreams = make([]Upstream, n)

	all, ready := newBitset(n), newBitset(n)
	caps := map[ResourceKey]*capability{}
	for i, f := range facts {
		if f.Ready {
			ready.set(i)
		}
		u := f.Upstream
		u.Capabilities = true
		// The default route balances over every proven upstream (xds builds AllCluster from those with
		// Capabilities), so "served by all" means all of them.
		all.set(i)
		for _, doc := range []*Document{f.API, f.APIs} {
			if doc == nil {
				continue
			}
			u.Resources += addCapabilities(caps, doc.Groups, i, n)
		}
		t.Upstreams[i] = u
	}

	names := func(s bitset) []string {
		var out []string
		for i := range n {
			if s.has(i) {
				out = append(out, facts[i].Name)
			}
		}
		return out
	}
	setOf := map[string]SetID{} // bitset key -> set
	sets := map[SetID]CapabilitySet{}
	// setFor names the upstreams of s; a set of several joins t.Sets, so xds makes its cluster.
	setFor := func(s bitset) SetID {
		k := s.key()
		id, ok := setOf[k]
		if !ok {
			members := names(s) // sorted: facts are
			id = NewSetID(members)
			setOf[k] = id
			if len(members) > 1 {
				sets[id] = CapabilitySet{ID: id, Members: members}
			}
		}
		return id
	}
	decide := func(s bitset) Decision {
		switch {
		case s.equal(all):
			return Decision{Action: ActionDefault}
		case !s.intersects(ready):
			return Decision{Action: ActionUnavailable}
		}
		return Decision{Action: ActionRoute, Set: setFor(s)}
	}
	for key, c := range caps {
		r := route{Decision: decide(c.servers)}
		for vi, vs := range c.verbs {
			if vs == nil || vs.equal(c.servers) {
				continue
			}
			if d := decide(vs); d != r.Decision {
				if r.byVerb == nil {
					r.byVerb = map[string]Decision{}
				}
				r.byVerb[standardVerbs[vi]] = d
			}
		}
		t.routes[key] = r
	}
	if len(departed) > 0 {
		gone := map[ResourceKey]*capability{}
		for _, f := range departed {
			for _, doc := range []*Document{f.API, f.APIs} {
				if doc != nil {
					addCapabilities(gone, doc.Groups, 0, 1)
				}
			}
		}
		for key := range gone {
			if _, served := t.routes[key]; !served {
				t.routes[key] = route{Decision: Decision{Action: ActionUnavailable}}
			}
		}
	}
	if members, all := schemaSet(t.Upstreams, len(caps)); !all {
		anyReady := false
		for _, m := range members {
			u, _ := t.Upstream(m)
			anyReady = anyReady || u.Ready
		}
		if anyReady {
			id := NewSetID(members)
			t.schemas = Decision{Action: ActionRoute, Set: id}
			if len(members) > 1 {
				sets[id] = CapabilitySet{ID: id, Members: members}
			}
		}
	}
	t.openapi = buildOpenAPI(now, facts, caps, ready, setFor, memo)
	for _, s := range sets {
		t.Sets = append(t.Sets, s)
	}
	slices.SortFunc(t.Sets, func(a, b CapabilitySet) int { return strings.Compare(string(a.ID), string(b.ID)) })

	var apiDocs, apisDocs []*Document
	for _, f := range facts {
		apiDocs = append(apiDocs, f.API)
		apisDocs = append(apisDocs, f.APIs)
	}
	t.API = mergedDocument(apiDocs)
	t.APIs = mergedDocument(apisDocs)
	return t
}

// addCapabilities records that upstream i serves every resource (and subresource) in groups and
// returns how many keys that is.
func addCapabilities(caps map[ResourceKey]*capability, groups []apidiscoveryv2.APIGroupDiscovery, i, n int) int {
	count := 0
	add := func(key ResourceKey, verbs []string) {
		c := caps[key]
		if c == nil {
			c = &capability{servers: newBitset(n)}
			caps[key] = c
		}
		c.servers.set(i)
		for _, v := range verbs {
			if vi := verbIndex(v); vi >= 0 {
				if c.verbs[vi] == nil {
					c.verbs[vi] = newBitset(n)
				}
				c.verbs[vi].set(i)
			}
		}
		count++
	}
	for gi := range groups {
		g := &groups[gi]
		for vi := range g.Versions {
			v := &g.Versions[vi]
			for ri := range v.Resources {
				r := &v.Resources[ri]
				add(ResourceKey{Group: g.Name, Version: v.Version, Resource: r.Resource}, r.Verbs)
				for si := range r.Subresources {
					s := &r.Subresources[si]
					add(ResourceKey{Group: g.Name, Version: v.Version, Resource: r.Resource, Subresource: s.Subresource}, s.Verbs)
				}
			}
		}
	}
	return count
}
