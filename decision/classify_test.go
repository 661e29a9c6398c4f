package decision

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

var infoFactory = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// reference classifies like the apiserver: Go's server parses the request line, RequestInfoFactory
// reads the decoded path. ok is false when either refuses the request.
func reference(method, rawPath string) (*request.RequestInfo, bool) {
	u, err := url.ParseRequestURI(rawPath)
	if err != nil {
		return nil, false
	}
	info, err := infoFactory.NewRequestInfo(&http.Request{Method: method, URL: u})
	if err != nil {
		return nil, false
	}
	return info, true
}

// referenceDiscovery says whether the apiserver serves a non-resource request from its discovery
// handlers: /api and /api/<version> (the legacy core handlers), /apis, /apis/<group> and
// /apis/<group>/<version> (k8s.io/apiserver pkg/endpoints/discovery and the group installer), on the
// path as RequestInfo splits it.
func referenceDiscovery(info *request.RequestInfo) bool {
	if info.IsResourceRequest {
		return false
	}
	trimmed := strings.Trim(info.Path, "/")
	if trimmed == "" {
		return false
	}
	parts := strings.Split(trimmed, "/")
	switch len(parts) {
	case 1, 2:
		return parts[0] == "api" || parts[0] == "apis"
	case 3:
		return parts[0] == "apis"
	}
	return false
}

func compare(t *testing.T, method, path string) {
	t.Helper()
	want, ok := reference(method, path)
	got, err := Classify(method, path)
	if !ok {
		// The apiserver never sees this request (Go's server refuses the request line) or refuses it
		// itself: so must we, never classify it.
		if err == nil {
			t.Errorf("%s %q: the reference refuses it, we classified %+v", method, path, got)
		}
		return
	}
	if err != nil {
		t.Errorf("%s %q: we refused (%v), reference: %+v", method, path, err, want)
		return
	}
	if (got.Kind == Resource) != want.IsResourceRequest {
		t.Fatalf("%s %q: resource %v, reference %v", method, path, got.Kind == Resource, want.IsResourceRequest)
	}
	if !want.IsResourceRequest {
		if (got.Kind == Discovery) != referenceDiscovery(want) {
			t.Errorf("%s %q: kind %v, reference discovery %v (path %q)", method, path, got.Kind, referenceDiscovery(want), want.Path)
		}
		return
	}
	name := want.Name
	if got.Name == "" && name != "" && (want.Verb == "list" || want.Verb == "watch") {
		name = "" // from a metadata.name field selector: not used for routing
	}
	if got.Key.Group != want.APIGroup || got.Key.Version != want.APIVersion || got.Key.Resource != want.Resource ||
		got.Key.Subresource != want.Subresource || got.Verb != want.Verb || got.Namespace != want.Namespace || got.Name != name {
		t.Errorf("%s %q:\n got %+v\nwant group=%q version=%q resource=%q sub=%q verb=%q ns=%q name=%q", method, path, got,
			want.APIGroup, want.APIVersion, want.Resource, want.Subresource, want.Verb, want.Namespace, want.Name)
	}
}

var classifySeeds = []struct{ method, path string }{
	{"GET", "/api/v1/pods"},
	{"GET", "/api/v1/namespaces/default/pods"},
	{"GET", "/api/v1/namespaces/default/pods/p1"},
	{"GET", "/api/v1/namespaces/default/pods/p1/log"},
	{"POST", "/api/v1/namespaces/default/pods/p1/exec?command=ls"},
	{"GET", "/api/v1/namespaces/default/pods?watch=true"},
	{"GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5"},
	{"GET", "/api/v1/namespaces/default/pods?watch=false"},
	{"GET", "/api/v1/namespaces/default/pods?watch=0"},
	{"GET", "/api/v1/namespaces/default/pods?watch"},
	{"GET", "/api/v1/namespaces/default/pods?watch=FALSE"},
	{"GET", "/api/v1/namespaces/default/pods?limit=abc&watch=true"},
	{"GET", "/api/v1/pods?fieldSelector=metadata.name%3Dp1"},
	{"GET", "/api/v1/watch/namespaces/default/pods"},
	{"GET", "/api/v1/watch/pods"},
	{"GET", "/api/v1/watch"},
	{"GET", "/api/v1/proxy/namespaces/default/pods/p1/x/y"},
	{"DELETE", "/api/v1/namespaces/default/pods"},
	{"DELETE", "/api/v1/namespaces/default/pods/p1"},
	{"PUT", "/api/v1/namespaces/ns1/status"},
	{"PUT", "/api/v1/namespaces/ns1/finalize"},
	{"GET", "/api/v1/namespaces/ns1"},
	{"GET", "/api/v1/namespaces"},
	{"PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale"},
	{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{"POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p?watch=true"},
	{"GET", "/apis"},
	{"GET", "/apis/apps"},
	{"GET", "/apis/apps/v1"},
	{"GET", "/api"},
	{"GET", "/api/v1"},
	{"GET", "/healthz"},
	{"GET", "/openapi/v3/apis/apps/v1"},
	{"GET", "/"},
	{"GET", "//api//v1//pods"},
	{"GET", "/api/v1/namespaces/a%2Fb/pods"},
	{"GET", "/api/v1/../v1/pods"},
	{"OPTIONS", "/api/v1/pods"},
	{"CONNECT", "/api/v1/namespaces/x/pods/y/exec"},
	{"GET", "/api/v1/pods/a/b/c/d/e/f/g/h/i/j/k"},
	{"GET", "/apis/g/v/namespaces/n/r/name/sub/x/y/z"},
	{"GET", "/api/v1/pods?watch=1;x=2"},
	{"GET", "/api/v1/pods?w%61tch=1"},
	{"GET", "/api/v1/pods?watch=%zz"},
	{"GET", "/apis//v1"},
	{"GET", "/api/"},
	{"GET", "/apis/apps/"},
	{"GET", "//apis"},
	{"GET", "/apis/apps/v1/"},
	{"GET", "/api/v1/%zz"},
	{"GET", "/api/v1/\x01"},
	{"GET", "/apis/g/v/proxy"},
}

func TestClassifyMatchesRequestInfoFactory(t *testing.T) {
	for _, s := range classifySeeds {
		compare(t, s.method, s.path)
	}
}

// FuzzClassify holds Classify equal to the apiserver's own classification. `go test` replays only
// the seeds; the bounded fuzz run is
//
//	go test ./decision -run '^$' -fuzz '^FuzzClassify$' -fuzztime 25s
func FuzzClassify(f *testing.F) {
	for _, s := range classifySeeds {
		f.Add(s.method, s.path)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		if len(path) > 0 && path[0] != '/' {
			path = "/" + path
		}
		compare(t, method, path)
	})
}

func BenchmarkClassify(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := Classify("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?watch=true&resourceVersion=1"); r.Verb != "watch" {
			b.Fatal(r)
		}
	}
}
