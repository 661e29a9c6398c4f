package decision

import (
	"maps"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/internal/wire"
)

// PathKind is the path shape a Row matches.
type PathKind uint8

const (
	// PathResource: the request shapes Classify maps to Row.Key (and Row.Verb), as
	// k8s.io/apiserver's RequestInfo reads them:
	// /api/<v>/ or /apis/<g>/<v>/ [watch/] [namespaces/<ns>/] <resource> [/<name> [/<subresource>]].
	PathResource PathKind = iota
	// PathOpenAPIDocument: /openapi/v3/<Row.Doc>, the key as kube-openapi's handler3 takes it.
	PathOpenAPIDocument
	// PathOpenAPIIndex: GET /openapi/v3, while the front has an index of its own.
	PathOpenAPIIndex
	// PathDiscovery: /api, /api/<v>, /apis, /apis/<g>, /apis/<g>/<v>.
	PathDiscovery
	// PathSchemas: /openapi and every path under /openapi/.
	PathSchemas
	// PathAny: every request no earlier row takes (the last row).
	PathAny
)

func (k PathKind) String() string {
	return [...]string{"resource", "openapi-document", "openapi-index", "discovery", "schemas", "any"}[k]
}

// Row is one request shape and its decision. A row holds for every credential (a request without
// credentials goes to the anonymous twin of the same cluster) and, where Upgrades, for upgrades (to
// the HTTP/1.1 twin); Twin names the cluster of a request.
type Row struct {
	Path PathKind
	// Key and Verb: PathResource. Verb "" is every verb of the key that no other row of the key
	// names; a named verb is one the classifier gives (get, list, watch, create, ...).
	Key  ResourceKey
	Verb string
	// Doc: PathOpenAPIDocument, the document key.
	Doc string
	Decision
	// Merged: an ActionServe row whose merged document the front holds: its GETs are answered at
	// the front, every other request goes to Set.
	Merged bool
	// Upgrades: upgrade requests take the row too. The OpenAPI and discovery rows refuse them (an
	// upgrade there takes the schemas row).
	Upgrades bool
}

// Table is one Topology's decisions, compiled once by Compile: the rows in the order a first-match
// route table needs them (resource keys sorted, each key's verb rows after its row for every verb;
// OpenAPI documents sorted; the index; discovery; schemas; any), and lookups by key for ext_proc.
// Compile also names each row's cluster and its twins, so that Decide only looks them up.
// Immutable: every method only reads.
type Table struct {
	version string
	rows    []Row
	// targets[i]: where row i sends a request, twins included (one per distinct set, shared by
	// the rows that name it; none for ActionUnavailable).
	targets  []*twins
	keys     map[ResourceKey][2]int32 // a key's rows: [start, end)
	docs     map[string]int32
	index    bool
	schemas  Decision
	toSchema *twins // targets of the schemas row
	clusters map[SetID]*twins
}

// Empty is the table of no decisions: every request takes the last row.
var Empty = Compile(Input{})

// KeyDecision is the input of one resource key: its decision for every verb, and the verbs decided
// otherwise.
type KeyDecision struct {
	Key ResourceKey
	Decision
	ByVerb map[string]Decision
}

// DocDecision is the input of one OpenAPI v3 document key.
type DocDecision struct {
	Key string
	Decision
	Merged bool
}

// Input is what a Topology has decided, as Compile reads it.
type Input struct {
	Version string
	// Resources: keys whose decision is not the default for every verb, in any order.
	Resources []KeyDecision
	// OpenAPI: document keys whose decision is not ActionDefault, in any order.
	OpenAPI []DocDecision
	// OpenAPIIndex: the front serves its own /openapi/v3 index.
	OpenAPIIndex bool
	// Schemas: where schema requests go (ActionRoute or ActionDefault).
	Schemas Decision
}

// Compile makes the Table of in. It is pure and keeps nothing of in.
func Compile(in Input) *Table {
	t := &Table{version: in.Version, keys: make(map[ResourceKey][2]int32, len(in.Resources)),
		docs: make(map[string]int32, len(in.OpenAPI)), index: in.OpenAPIIndex, schemas: in.Schemas, clusters: map[SetID]*twins{}}
	n := len(in.Resources) + len(in.OpenAPI) + 4
	for _, r := range in.Resources {
		n += len(r.ByVerb)
	}
	t.rows, t.targets = make([]Row, 0, n), make([]*twins, 0, n)
	res := slices.Clone(in.Resources)
	slices.SortFunc(res, func(a, b KeyDecision) int { return a.Key.Compare(b.Key) })
	for _, r := range res {
		start := int32(len(t.rows))
		t.add(Row{Path: PathResource, Key: r.Key, Decision: r.Decision, Upgrades: true})
		for _, v := range slices.Sorted(maps.Keys(r.ByVerb)) {
			t.add(Row{Path: PathResource, Key: r.Key, Verb: v, Decision: r.ByVerb[v], Upgrades: true})
		}
		t.keys[r.Key] = [2]int32{start, int32(len(t.rows))}
	}
	docs := slices.Clone(in.OpenAPI)
	slices.SortFunc(docs, func(a, b DocDecision) int { return strings.Compare(a.Key, b.Key) })
	for _, d := range docs {
		t.docs[d.Key] = int32(len(t.rows))
		t.add(Row{Path: PathOpenAPIDocument, Doc: d.Key, Decision: d.Decision, Merged: d.Merged && d.Action == ActionServe})
	}
	if in.OpenAPIIndex {
		t.add(Row{Path: PathOpenAPIIndex, Decision: Decision{Action: ActionServe}, Merged: true})
	}
	// Discovery is merged at the front; failing open its two roots go where the schemas go, so that
	// a client finds in discovery every resource whose schema it then reads.
	disc := Decision{Action: ActionServe}
	if in.Schemas.Action == ActionRoute {
		disc.Set = in.Schemas.Set
	}
	t.add(Row{Path: PathDiscovery, Decision: disc, Merged: true})
	t.add(Row{Path: PathSchemas, Decision: in.Schemas, Upgrades: true})
	t.toSchema = t.targets[len(t.targets)-1]
	t.add(Row{Path: PathAny, Upgrades: true})
	return t
}

func (t *Table) add(r Row) {
	t.rows = append(t.rows, r)
	if r.Set != "" && t.clusters[r.Set] == nil {
		t.clusters[r.Set] = newTwins(wire.SetCluster(r.Set.Members()))
	}
	t.targets = append(t.targets, t.target(r.Decision))
}

// target is where d sends a request: the cluster of its set for ActionRoute and ActionServe, every
// upstream for ActionDefault (and for a route without a set), nowhere for ActionUnavailable.
func (t *Table) target(d Decision) *twins {
	switch d.Action {
	case ActionUnavailable:
		return &none
	case ActionRoute, ActionServe:
		if d.Set != "" {
			return t.clusters[d.Set]
		}
	}
	return &all
}

// Version is the Topology version the table was compiled from.
func (t *Table) Version() string { return t.version }

// Rows returns a copy of the rows, in order.
func (t *Table) Rows() []Row { return slices.Clone(t.rows) }

// Len is the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// Resource returns the decision for a request for key with verb. A key no row names gets
// ActionDefault: every upstream serves it, or none does and any apiserver's 404 is the truth.
func (t *Table) Resource(key ResourceKey, verb string) Decision {
	i, ok := t.resourceRow(key, verb)
	if !ok {
		return Decision{}
	}
	return t.rows[i].Decision
}

// resourceRow is the index of the row that decides key with verb: the verb's own row, else the
// key's row for every verb. ok false: no row names key.
func (t *Table) resourceRow(key ResourceKey, verb string) (int32, bool) {
	span, ok := t.keys[key]
	if !ok {
		return 0, false
	}
	for i := span[0] + 1; i < span[1]; i++ {
		if t.rows[i].Verb == verb {
			return i, true
		}
	}
	return span[0], true
}

// OpenAPIDocument returns the row of an OpenAPI v3 document key; ok false: ActionDefault (it is a
// schema request like any other).
func (t *Table) OpenAPIDocument(key string) (Row, bool) {
	i, ok := t.docs[key]
	if !ok {
		return Row{}, false
	}
	return t.rows[i], true
}

// Schemas returns where schema requests go.
func (t *Table) Schemas() Decision { return t.schemas }

// Cluster names the Envoy cluster of set (internal/wire), computed once per table for its own sets.
func (t *Table) Cluster(set SetID) string {
	if set == "" {
		return wire.AllCluster
	}
	if c := t.clusters[set]; c != nil {
		return c.of(false, false)
	}
	return wire.SetCluster(set.Members())
}

// Twin is the twin of cluster that carries a request: the HTTP/1.1 twin for an upgrade (exec,
// attach, port-forward cannot ride HTTP/2; without credentials it has no identity and the apiserver
// refuses it), the anonymous twin for a request without credentials, else cluster itself.
func Twin(cluster string, anonymous, upgrade bool) string {
	switch {
	case upgrade:
		return wire.HTTP1Cluster(cluster)
	case anonymous:
		return wire.AnonCluster(cluster)
	}
	return cluster
}

// twins is a cluster and its twins, named once (Twin) so that a request only picks one: [0] the
// cluster, [1] its anonymous twin, [2] its HTTP/1.1 twin.
type twins [3]string

func newTwins(cluster string) *twins {
	return &twins{cluster, Twin(cluster, true, false), Twin(cluster, false, true)}
}

// of is the twin that carries a request (Twin).
func (w *twins) of(anonymous, upgrade bool) string {
	switch {
	case upgrade:
		return w[2]
	case anonymous:
		return w[1]
	}
	return w[0]
}

var (
	// all: every upstream.
	all = *newTwins(wire.AllCluster)
	// none: no cluster (ActionUnavailable is answered at the front).
	none twins
)
