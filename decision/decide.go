package decision

import "net/http"

// Request is what the table reads from one request.
type Request struct {
	Method, Path string
	// Anonymous: no Authorization header and no verified client certificate (Envoy says so through
	// the route it chose before any filter ran; no header a client sets decides it).
	Anonymous bool
	// Upgrade: the request asks for a protocol upgrade (exec, attach, port-forward).
	Upgrade bool
	// Class is Classify(Method, Path), which the caller ran first (a request it refuses is a 400
	// before any decision).
	Class Class
}

// Answer is the table's answer to one request.
type Answer struct {
	// Path is the kind of the row that decided; PathAny: no other row took the request.
	Path PathKind
	Decision
	// Cluster is the cluster the request goes to, its twin for this request (Twin) included: for
	// ActionServe the one whose apiserver authorizes the request first. "" for ActionUnavailable.
	Cluster string
	// Doc and Query: an OpenAPI v3 document's key, and the raw query of an OpenAPI request.
	Doc, Query string
}

// Decide answers r from the rows, in their order: the first that takes the request decides. It
// only looks up what Compile named (the row, its cluster and twins) and allocates nothing.
func (t *Table) Decide(r Request) Answer {
	switch r.Class.Kind {
	case Resource:
		i, ok := t.resourceRow(r.Class.Key, r.Class.Verb)
		if !ok {
			return Answer{Path: PathResource, Cluster: all.of(r.Anonymous, r.Upgrade)}
		}
		return Answer{Path: PathResource, Decision: t.rows[i].Decision, Cluster: t.targets[i].of(r.Anonymous, r.Upgrade)}
	case Discovery:
		// Any apiserver authorizes a discovery path as well as another: the default cluster asks;
		// the front serves only GETs (and only paths its merged documents hold: extproc knows them).
		if r.Method == http.MethodGet {
			return Answer{Path: PathDiscovery, Decision: Decision{Action: ActionServe}, Cluster: all.of(r.Anonymous, r.Upgrade)}
		}
		return t.fallback(r)
	}
	if a, ok := t.openAPI(r); ok {
		return a
	}
	if IsSchemaPath(r.Path) && t.schemas.Action == ActionRoute {
		return Answer{Path: PathSchemas, Decision: t.schemas, Cluster: t.toSchema.of(r.Anonymous, r.Upgrade)}
	}
	return t.fallback(r)
}

// openAPI answers an OpenAPI v3 request a row of its own decides.
func (t *Table) openAPI(r Request) (Answer, bool) {
	key, query, index, ok := OpenAPIPath(r.Path)
	if !ok {
		return Answer{}, false
	}
	if index {
		if !t.index || r.Method != http.MethodGet {
			return Answer{}, false
		}
		return Answer{Path: PathOpenAPIIndex, Decision: Decision{Action: ActionServe}, Cluster: all.of(r.Anonymous, r.Upgrade), Query: query}, true
	}
	i, ok := t.docs[key]
	if !ok {
		return Answer{}, false
	}
	row := &t.rows[i]
	a := Answer{Path: PathOpenAPIDocument, Decision: row.Decision, Cluster: t.targets[i].of(r.Anonymous, r.Upgrade), Doc: row.Doc, Query: query}
	if row.Action == ActionServe && (!row.Merged || r.Method != http.MethodGet) {
		// Served at the front only as a GET of a document it holds: anything else goes to the set
		// Envoy's route table sends it to when ext_proc is not there (the same cluster).
		a.Action = ActionRoute
	}
	return a, true
}

// fallback is the last row: every upstream.
func (t *Table) fallback(r Request) Answer {
	return Answer{Path: PathAny, Cluster: all.of(r.Anonymous, r.Upgrade)}
}
