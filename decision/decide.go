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

// Decide answers r from the rows, in their order: the first that takes the request decides.
func (t *Table) Decide(r Request) Answer {
	switch r.Class.Kind {
	case Resource:
		return t.answer(r, Answer{Path: PathResource, Decision: t.Resource(r.Class.Key, r.Class.Verb)})
	case Discovery:
		// Any apiserver authorizes a discovery path as well as another: the default cluster asks;
		// the front serves only GETs (and only paths its merged documents hold: extproc knows them).
		if r.Method == http.MethodGet {
			return Answer{Path: PathDiscovery, Decision: Decision{Action: ActionServe}, Cluster: Twin(t.Cluster(""), r.Anonymous, r.Upgrade)}
		}
		return t.fallback(r)
	}
	if a, ok := t.openAPI(r); ok {
		return a
	}
	if IsSchemaPath(r.Path) && t.schemas.Action == ActionRoute {
		return t.answer(r, Answer{Path: PathSchemas, Decision: t.schemas})
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
		return Answer{Path: PathOpenAPIIndex, Decision: Decision{Action: ActionServe}, Cluster: Twin(t.Cluster(""), r.Anonymous, r.Upgrade), Query: query}, true
	}
	row, ok := t.OpenAPIDocument(key)
	if !ok {
		return Answer{}, false
	}
	a := Answer{Path: PathOpenAPIDocument, Decision: row.Decision, Doc: key, Query: query}
	if row.Action == ActionServe && (!row.Merged || r.Method != http.MethodGet) {
		// Served at the front only as a GET of a document it holds: anything else goes to the set
		// Envoy's route table sends it to when ext_proc is not there.
		a.Action = ActionRoute
	}
	return t.answer(r, a), true
}

// fallback is the last row: every upstream.
func (t *Table) fallback(r Request) Answer {
	return Answer{Path: PathAny, Cluster: Twin(t.Cluster(""), r.Anonymous, r.Upgrade)}
}

// answer names the cluster of a's decision.
func (t *Table) answer(r Request, a Answer) Answer {
	switch a.Action {
	case ActionRoute, ActionServe:
		a.Cluster = Twin(t.Cluster(a.Set), r.Anonymous, r.Upgrade)
	case ActionDefault:
		a.Cluster = Twin(t.Cluster(""), r.Anonymous, r.Upgrade)
	}
	return a
}
