package discovery

import (
	"maps"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/decision"
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

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) or(o bitset) {
	for i := range b {
		b[i] |= o[i]
	}
}
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

// Build makes a Topology from facts, as named steps: set the unproven and departed upstreams apart,
// gather who serves what (once per distinct document), decide every resource key and the schemas,
// decide OpenAPI, merge discovery, and compile the decision table both ext_proc and xds read. The
// same facts give the same Topology (but for Version and Generated): Build is pure.
func Build(version string, now time.Time, facts []UpstreamFacts) *Topology {
	return build(version, now, facts, nil)
}

// build is Build merging OpenAPI documents through memo (the Controller's; nil: merge every time),
// which changes no byte of the Topology, only what a merge costs.
func build(version string, now time.Time, facts []UpstreamFacts, memo *openapi.Memo) *Topology {
	t := &Topology{Version: version, Generated: now}
	proven, departed := t.partition(facts)
	b := newBuilder(proven)
	t.Upstreams = b.upstreams
	keys := b.decideResources(departed)
	schemas := b.decideSchemas()
	t.openapi = buildOpenAPI(now, proven, b.caps, b.ready, b.setFor, memo)
	t.Sets = b.capabilitySets()
	t.API, t.APIs = mergeDiscovery(proven)
	t.table = decision.Compile(decision.Input{Version: version, Resources: keys, OpenAPI: t.openAPIRows(),
		OpenAPIIndex: t.openapi.index != nil, Schemas: schemas})
	return t
}

// partition returns the proven upstreams sorted by name and the departed ones, recording the
// unproven in t.Unproven. An upstream is given to Envoy only once it proved to be an apiserver: its
// discovery was fetched over verified TLS and parsed as a valid document. Before that it has no
// cluster, so a Lease that points at any other address makes Envoy open no connection at all.
func (t *Topology) partition(facts []UpstreamFacts) (proven, departed []UpstreamFacts) {
	for _, f := range facts {
		switch {
		case f.Departed:
			departed = append(departed, f)
		case f.APIs == nil && f.API == nil:
			u := f.Upstream
			u.Capabilities, u.Resources = false, 0
			t.Unproven = append(t.Unproven, u)
		default:
			proven = append(proven, f)
		}
	}
	slices.SortFunc(proven, func(a, b UpstreamFacts) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(t.Unproven, func(a, b Upstream) int { return strings.Compare(a.Name, b.Name) })
	return proven, departed
}

// builder holds what deciding needs: the proven upstreams by index, who serves what, and the sets
// named so far.
type builder struct {
	facts      []UpstreamFacts
	upstreams  []Upstream
	all, ready bitset
	caps       map[ResourceKey]*capability
	setOf      map[string]SetID // bitset key -> set
	sets       map[SetID]CapabilitySet
}

// newBuilder gathers the capabilities of the proven upstreams.
func newBuilder(facts []UpstreamFacts) *builder {
	n := len(facts)
	b := &builder{facts: facts, upstreams: make([]Upstream, n), all: newBitset(n), ready: newBitset(n),
		caps: map[ResourceKey]*capability{}, setOf: map[string]SetID{}, sets: map[SetID]CapabilitySet{}}
	for i, f := range facts {
		// The default route balances over every proven upstream (xds builds AllCluster from those
		// with Capabilities), so "served by all" means all of them.
		b.all.set(i)
		if f.Ready {
			b.ready.set(i)
		}
	}
	resources := make([]int, n)
	for _, d := range distinctDocuments(facts) {
		count := addCapabilities(b.caps, d.doc.Groups, d.members)
		for i := range n {
			if d.members.has(i) {
				resources[i] += count
			}
		}
	}
	for i, f := range facts {
		u := f.Upstream
		u.Capabilities, u.Resources = true, resources[i]
		b.upstreams[i] = u
	}
	return b
}

// servedDocument is a discovery document and the upstreams that serve it.
type servedDocument struct {
	doc     *Document
	members bitset
}

// distinctDocuments groups the upstreams' /api and /apis documents by their hash (equal hashes mean
// identical documents): upstreams of one version share theirs, so each is read once, for all of them.
func distinctDocuments(facts []UpstreamFacts) []*servedDocument {
	type docID struct {
		slot int // 0: /api, 1: /apis
		id   any // the hash, or the document itself when it has none
	}
	var docs []*servedDocument
	byID := map[docID]*servedDocument{}
	for i, f := range facts {
		for slot, doc := range []*Document{f.API, f.APIs} {
			if doc == nil {
				continue
			}
			id := docID{slot, doc}
			if doc.Hash != "" {
				id.id = doc.Hash
			}
			d := byID[id]
			if d == nil {
				d = &servedDocument{doc: doc, members: newBitset(len(facts))}
				byID[id] = d
				docs = append(docs, d)
			}
			d.members.set(i)
		}
	}
	return docs
}

// setFor names the upstreams of s; a set of several joins Topology.Sets, so xds makes its cluster.
func (b *builder) setFor(s bitset) SetID {
	k := s.key()
	id, ok := b.setOf[k]
	if !ok {
		var members []string // sorted: facts are
		for i := range b.facts {
			if s.has(i) {
				members = append(members, b.facts[i].Name)
			}
		}
		id = NewSetID(members)
		b.setOf[k] = id
		b.addSet(id, members)
	}
	return id
}

func (b *builder) addSet(id SetID, members []string) {
	if len(members) > 1 {
		b.sets[id] = CapabilitySet{ID: id, Members: members}
	}
}

// decide is the decision for the servers s of a key: the default route when every upstream serves
// it, 503 when none of its servers is ready, else exactly its servers.
func (b *builder) decide(s bitset) Decision {
	switch {
	case s.equal(b.all):
		return Decision{Action: ActionDefault}
	case !s.intersects(b.ready):
		return Decision{Action: ActionUnavailable}
	}
	return Decision{Action: ActionRoute, Set: b.setFor(s)}
}

// decideResources decides every resource key (and the verbs whose servers differ) and returns the
// keys not decided default for every verb. A key only departed upstreams served answers 503 instead
// of 404 until they are forgotten (UpstreamFacts.Departed).
func (b *builder) decideResources(departed []UpstreamFacts) []decision.KeyDecision {
	var out []decision.KeyDecision
	for key, c := range b.caps {
		r := decision.KeyDecision{Key: key, Decision: b.decide(c.servers)}
		for vi, vs := range c.verbs {
			if vs == nil || vs.equal(c.servers) {
				continue
			}
			if d := b.decide(vs); d != r.Decision {
				if r.ByVerb == nil {
					r.ByVerb = map[string]Decision{}
				}
				r.ByVerb[standardVerbs[vi]] = d
			}
		}
		if r.Action != ActionDefault || r.ByVerb != nil {
			out = append(out, r)
		}
	}
	gone := map[ResourceKey]*capability{}
	one := newBitset(1)
	one.set(0)
	for _, f := range departed {
		for _, doc := range []*Document{f.API, f.APIs} {
			if doc != nil {
				addCapabilities(gone, doc.Groups, one)
			}
		}
	}
	for key := range gone {
		if _, served := b.caps[key]; !served {
			out = append(out, decision.KeyDecision{Key: key, Decision: Decision{Action: ActionUnavailable}})
		}
	}
	return out
}

// decideSchemas decides where schema requests go (schemas.go): the chosen group, unless it is every
// upstream or none of it is ready.
func (b *builder) decideSchemas() Decision {
	members, all := schemaSet(b.upstreams, len(b.caps))
	if all {
		return Decision{}
	}
	for _, m := range members {
		if u, _ := findUpstream(b.upstreams, m); u.Ready {
			id := NewSetID(members)
			b.addSet(id, members)
			return Decision{Action: ActionRoute, Set: id}
		}
	}
	return Decision{}
}

// capabilitySets are the sets of several upstreams any decision names, sorted by ID.
func (b *builder) capabilitySets() []CapabilitySet {
	out := slices.Collect(maps.Values(b.sets))
	slices.SortFunc(out, func(a, b CapabilitySet) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// mergeDiscovery merges the proven upstreams' /api and /apis documents for the front.
func mergeDiscovery(facts []UpstreamFacts) (api, apis MergedDiscovery) {
	apiDocs, apisDocs := make([]*Document, len(facts)), make([]*Document, len(facts))
	for i, f := range facts {
		apiDocs[i], apisDocs[i] = f.API, f.APIs
	}
	return mergedDocument(apiDocs), mergedDocument(apisDocs)
}

// openAPIRows are the OpenAPI v3 decisions for the decision table.
func (t *Topology) openAPIRows() []decision.DocDecision {
	var out []decision.DocDecision
	for key, d := range t.openapi.decisions {
		if d.Action != ActionDefault {
			out = append(out, decision.DocDecision{Key: key, Decision: Decision{Action: d.Action, Set: d.Set}, Merged: t.openapi.merged[key] != nil})
		}
	}
	return out
}

// addCapabilities records that the upstreams in members serve every resource (and subresource) in
// groups and returns how many keys that is.
func addCapabilities(caps map[ResourceKey]*capability, groups []apidiscoveryv2.APIGroupDiscovery, members bitset) int {
	count := 0
	add := func(key ResourceKey, verbs []string) {
		c := caps[key]
		if c == nil {
			c = &capability{servers: make(bitset, len(members))}
			caps[key] = c
		}
		c.servers.or(members)
		for _, v := range verbs {
			if vi := verbIndex(v); vi >= 0 {
				if c.verbs[vi] == nil {
					c.verbs[vi] = make(bitset, len(members))
				}
				c.verbs[vi].or(members)
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
