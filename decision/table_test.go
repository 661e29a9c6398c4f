package decision

import (
	"fmt"
	"testing"

	"github.com/skewgate/skewgate/internal/wire"
)

var (
	keyMAP  = ResourceKey{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	keyPods = ResourceKey{Version: "v1", Resource: "pods", Subresource: "exec"}
	keyGone = ResourceKey{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func testInput() Input {
	return Input{Version: "t-1",
		Resources: []KeyDecision{
			{Key: keyGone, Decision: Decision{Action: ActionUnavailable}},
			{Key: keyMAP, Decision: Decision{Action: ActionRoute, Set: "new"}, ByVerb: map[string]Decision{"watch": {Action: ActionRoute, Set: "new-1,new-2"}, "delete": {}}},
			{Key: keyPods, ByVerb: map[string]Decision{"create": {Action: ActionRoute, Set: "old"}}},
		},
		OpenAPI: []DocDecision{
			{Key: "apis/x/v1", Decision: Decision{Action: ActionServe, Set: "new"}, Merged: true},
			{Key: "apis/apps/v1", Decision: Decision{Action: ActionRoute, Set: "new"}},
			{Key: "apis/y/v1", Decision: Decision{Action: ActionUnavailable}},
		},
		OpenAPIIndex: true,
		Schemas:      Decision{Action: ActionRoute, Set: "new-1,new-2"},
	}
}

// TestCompileOrdersRows: the rows come in the order a first-match route table needs, whatever the
// order of the input: resource keys sorted with each key's verb rows after its row for every verb,
// OpenAPI documents sorted, the index, discovery, schemas, and the row for everything else last.
func TestCompileOrdersRows(t *testing.T) {
	var got []string
	for _, r := range Compile(testInput()).Rows() {
		s := r.Path.String()
		switch r.Path {
		case PathResource:
			s += " " + r.Key.String() + " " + r.Verb
		case PathOpenAPIDocument:
			s += " " + r.Doc
		}
		got = append(got, fmt.Sprintf("%s=%s:%s", s, r.Action, r.Set))
	}
	want := []string{
		"resource pods/exec (v1) =default:",
		"resource pods/exec (v1) create=route:old",
		"resource mutatingadmissionpolicies.admissionregistration.k8s.io (v1) =route:new",
		"resource mutatingadmissionpolicies.admissionregistration.k8s.io (v1) delete=default:",
		"resource mutatingadmissionpolicies.admissionregistration.k8s.io (v1) watch=route:new-1,new-2",
		"resource widgets.example.com (v1) =unavailable:",
		"openapi-document apis/apps/v1=route:new",
		"openapi-document apis/x/v1=serve:new",
		"openapi-document apis/y/v1=unavailable:",
		"openapi-index=serve:",
		"discovery=serve:new-1,new-2",
		"schemas=route:new-1,new-2",
		"any=default:",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows\n%v\nwant\n%v", got, want)
	}
}

func TestTableResource(t *testing.T) {
	tab := Compile(testInput())
	for _, c := range []struct {
		key  ResourceKey
		verb string
		want Decision
	}{
		{keyMAP, "get", Decision{Action: ActionRoute, Set: "new"}},
		{keyMAP, "watch", Decision{Action: ActionRoute, Set: "new-1,new-2"}},
		{keyMAP, "delete", Decision{}},
		{keyPods, "create", Decision{Action: ActionRoute, Set: "old"}},
		{keyPods, "get", Decision{}},
		{keyGone, "list", Decision{Action: ActionUnavailable}},
		{ResourceKey{Version: "v1", Resource: "configmaps"}, "get", Decision{}},
	} {
		if got := tab.Resource(c.key, c.verb); got != c.want {
			t.Errorf("%v %s: %+v, want %+v", c.key, c.verb, got, c.want)
		}
	}
}

// TestTableDecide: what ext_proc answers, request by request, twins included.
func TestTableDecide(t *testing.T) {
	tab := Compile(testInput())
	newCluster, setCluster := wire.UpstreamCluster("new"), wire.SetCluster([]string{"new-1", "new-2"})
	for _, c := range []struct {
		method, path      string
		anonymous, upgrad bool
		want              Answer
	}{
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", false, false,
			Answer{Path: PathResource, Decision: Decision{Action: ActionRoute, Set: "new"}, Cluster: newCluster}},
		{"GET", "/apis/admissionregistration.k8s.io/v1/watch/mutatingadmissionpolicies", true, false,
			Answer{Path: PathResource, Decision: Decision{Action: ActionRoute, Set: "new-1,new-2"}, Cluster: wire.AnonCluster(setCluster)}},
		{"DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/x", false, false,
			Answer{Path: PathResource, Cluster: wire.AllCluster}},
		{"POST", "/api/v1/namespaces/d/pods/p/exec", true, true,
			Answer{Path: PathResource, Decision: Decision{Action: ActionRoute, Set: "old"}, Cluster: wire.HTTP1Cluster(wire.UpstreamCluster("old"))}},
		{"GET", "/apis/example.com/v1/widgets", false, false,
			Answer{Path: PathResource, Decision: Decision{Action: ActionUnavailable}}},
		{"GET", "/apis", true, false, Answer{Path: PathDiscovery, Decision: Decision{Action: ActionServe}, Cluster: wire.AnonCluster(wire.AllCluster)}},
		{"POST", "/apis", false, false, Answer{Path: PathAny, Cluster: wire.AllCluster}},
		{"GET", "/openapi/v3?x=1", false, false, Answer{Path: PathOpenAPIIndex, Decision: Decision{Action: ActionServe}, Cluster: wire.AllCluster, Query: "x=1"}},
		{"HEAD", "/openapi/v3", false, false, Answer{Path: PathSchemas, Decision: Decision{Action: ActionRoute, Set: "new-1,new-2"}, Cluster: setCluster}},
		{"GET", "/openapi/v3/apis/x/v1?hash=H", false, false,
			Answer{Path: PathOpenAPIDocument, Decision: Decision{Action: ActionServe, Set: "new"}, Cluster: newCluster, Doc: "apis/x/v1", Query: "hash=H"}},
		{"HEAD", "/openapi/v3/apis/x/v1", false, false,
			Answer{Path: PathOpenAPIDocument, Decision: Decision{Action: ActionRoute, Set: "new"}, Cluster: newCluster, Doc: "apis/x/v1"}},
		{"GET", "/openapi/v3/apis/y/v1", false, false,
			Answer{Path: PathOpenAPIDocument, Decision: Decision{Action: ActionUnavailable}, Doc: "apis/y/v1"}},
		{"GET", "/openapi/v3/apis/z/v1", false, false, Answer{Path: PathSchemas, Decision: Decision{Action: ActionRoute, Set: "new-1,new-2"}, Cluster: setCluster}},
		{"GET", "/openapi/v2", false, true, Answer{Path: PathSchemas, Decision: Decision{Action: ActionRoute, Set: "new-1,new-2"}, Cluster: wire.HTTP1Cluster(setCluster)}},
		{"GET", "/healthz", false, false, Answer{Path: PathAny, Cluster: wire.AllCluster}},
	} {
		class, err := Classify(c.method, c.path)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		got := tab.Decide(Request{Method: c.method, Path: c.path, Anonymous: c.anonymous, Upgrade: c.upgrad, Class: class})
		if got != c.want {
			t.Errorf("%s %s (anonymous %v, upgrade %v):\n got %+v\nwant %+v", c.method, c.path, c.anonymous, c.upgrad, got, c.want)
		}
	}
}

// TestDecideTwinsAsTwin: the twins Compile names are the ones Twin names, for every row's cluster and
// every credential and upgrade, so that a lookup answers as naming the twin per request would.
func TestDecideTwinsAsTwin(t *testing.T) {
	tab := Compile(testInput())
	paths := []string{
		"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v1/watch/mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/x",
		"/api/v1/namespaces/d/pods/p/exec", "/api/v1/namespaces/d/pods/p", "/apis/example.com/v1/widgets",
		"/api/v1/configmaps", "/apis", "/api/v1", "/openapi/v3", "/openapi/v3/apis/x/v1", "/openapi/v3/apis/apps/v1",
		"/openapi/v3/apis/y/v1", "/openapi/v3/apis/z/v1", "/openapi/v2", "/healthz",
	}
	n := 0
	for _, method := range []string{"GET", "POST", "DELETE", "HEAD"} {
		for _, path := range paths {
			class, err := Classify(method, path)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			for _, anonymous := range []bool{false, true} {
				for _, upgrade := range []bool{false, true} {
					a := tab.Decide(Request{Method: method, Path: path, Anonymous: anonymous, Upgrade: upgrade, Class: class})
					want := ""
					switch a.Action {
					case ActionRoute, ActionServe:
						// Named per request, from the set's members, as before Compile named them.
						set := wire.AllCluster
						if a.Set != "" {
							set = wire.SetCluster(a.Set.Members())
						}
						want = Twin(set, anonymous, upgrade)
					case ActionDefault:
						want = Twin(wire.AllCluster, anonymous, upgrade)
					}
					if a.Cluster != want {
						t.Errorf("%s %s (anonymous %v, upgrade %v): cluster %q, want %q (%+v)", method, path, anonymous, upgrade, a.Cluster, want, a)
					}
					if a.Action != ActionUnavailable && a.Set != "" {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("no request took a row with a set")
	}
}

// TestEmptyTable: a Topology with no decisions sends everything to every apiserver; discovery is
// still served at the front and has no fail-open set.
func TestEmptyTable(t *testing.T) {
	rows := Empty.Rows()
	if len(rows) != 3 || rows[0].Path != PathDiscovery || rows[0].Set != "" || rows[1].Path != PathSchemas || rows[1].Action != ActionDefault || rows[2].Path != PathAny {
		t.Errorf("rows %+v", rows)
	}
	class, _ := Classify("GET", "/openapi/v3")
	if a := Empty.Decide(Request{Method: "GET", Path: "/openapi/v3", Class: class}); a.Path != PathAny || a.Cluster != wire.AllCluster {
		t.Errorf("the index without a front index: %+v", a)
	}
}

// TestRowsAreACopy: a consumer cannot change the table through Rows.
func TestRowsAreACopy(t *testing.T) {
	tab := Compile(testInput())
	tab.Rows()[0].Set = "evil"
	if tab.Resource(keyMAP, "get").Set != "new" {
		t.Error("Rows exposed the table's own rows")
	}
}

func BenchmarkTableDecide(b *testing.B) {
	tab := Compile(testInput())
	const path = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true"
	b.ReportAllocs()
	for b.Loop() {
		c, _ := Classify("GET", path)
		if a := tab.Decide(Request{Method: "GET", Path: path, Class: c}); a.Action != ActionRoute {
			b.Fatal(a)
		}
	}
}

// BenchmarkTableDecideOnly is Decide alone (the requests classified once, outside the loop), over
// the shapes whose answer names a twin: without credentials, upgrades, a set, every upstream.
func BenchmarkTableDecideOnly(b *testing.B) {
	tab := Compile(testInput())
	var reqs []Request
	for _, c := range []struct {
		method, path       string
		anonymous, upgrade bool
	}{
		{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true", false, false},
		{"GET", "/apis/admissionregistration.k8s.io/v1/watch/mutatingadmissionpolicies", true, false},
		{"POST", "/api/v1/namespaces/d/pods/p/exec", false, true},
		{"GET", "/apis", true, false},
		{"GET", "/openapi/v3/apis/x/v1?hash=H", true, false},
		{"GET", "/openapi/v2", false, true},
		{"GET", "/healthz", true, false},
	} {
		class, err := Classify(c.method, c.path)
		if err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, Request{Method: c.method, Path: c.path, Anonymous: c.anonymous, Upgrade: c.upgrade, Class: class})
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range reqs {
			if a := tab.Decide(r); a.Cluster == "" {
				b.Fatal(a)
			}
		}
	}
	b.ReportMetric(float64(len(reqs)), "requests/op")
}
