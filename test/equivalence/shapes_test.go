package equivalence

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get"}

// classifierSeeds are the classifier's table (decision/classify_test.go) as method and path.
var classifierSeeds = []struct{ method, path string }{
	{"GET", "/api/v1/pods"}, {"GET", "/api/v1/namespaces/default/pods"}, {"GET", "/api/v1/namespaces/default/pods/p1"},
	{"GET", "/api/v1/namespaces/default/pods/p1/log"}, {"POST", "/api/v1/namespaces/default/pods/p1/exec?command=ls"},
	{"GET", "/api/v1/namespaces/default/pods?watch=true"}, {"GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5"},
	{"GET", "/api/v1/namespaces/default/pods?watch=false"}, {"GET", "/api/v1/namespaces/default/pods?watch=0"},
	{"GET", "/api/v1/namespaces/default/pods?watch"}, {"GET", "/api/v1/namespaces/default/pods?watch=FALSE"},
	{"GET", "/api/v1/namespaces/default/pods?limit=abc&watch=true"}, {"GET", "/api/v1/pods?fieldSelector=metadata.name%3Dp1"},
	{"GET", "/api/v1/watch/namespaces/default/pods"}, {"GET", "/api/v1/watch/pods"}, {"GET", "/api/v1/watch"},
	{"GET", "/api/v1/proxy/namespaces/default/pods/p1/x/y"}, {"DELETE", "/api/v1/namespaces/default/pods"},
	{"DELETE", "/api/v1/namespaces/default/pods/p1"}, {"PUT", "/api/v1/namespaces/ns1/status"}, {"PUT", "/api/v1/namespaces/ns1/finalize"},
	{"GET", "/api/v1/namespaces/ns1"}, {"GET", "/api/v1/namespaces"}, {"PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale"},
	{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{"POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{"GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p?watch=true"},
	{"GET", "/apis"}, {"GET", "/apis/apps"}, {"GET", "/apis/apps/v1"}, {"GET", "/api"}, {"GET", "/api/v1"}, {"GET", "/healthz"},
	{"GET", "/openapi/v3/apis/apps/v1"}, {"GET", "/openapi/v3/apis/apps/v1?hash=AB12"}, {"GET", "/openapi"}, {"GET", "/openapi/v2"},
	{"HEAD", "/openapi/v3"}, {"GET", "/openapiv2"}, {"GET", "/openapi-x/v3"}, {"POST", "/openapi/v3"}, {"GET", "/"}, {"GET", "//api//v1//pods"}, {"GET", "/api/v1/namespaces/a%2Fb/pods"},
	{"GET", "/api/v1/../v1/pods"}, {"OPTIONS", "/api/v1/pods"}, {"CONNECT", "/api/v1/namespaces/x/pods/y/exec"},
	{"GET", "/api/v1/pods/a/b/c/d/e/f/g/h/i/j/k"}, {"GET", "/apis/g/v/namespaces/n/r/name/sub/x/y/z"},
	{"GET", "/api/v1/pods?watch=1;x=2"}, {"GET", "/api/v1/pods?w%61tch=1"}, {"GET", "/api/v1/pods?watch=%zz"},
}

// fuzzCorpus reads decision's FuzzClassify corpus (method, path).
func fuzzCorpus(t testing.TB) [][2]string {
	dir := filepath.Join("..", "..", "decision", "testdata", "fuzz", "FuzzClassify")
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, f := range files {
		fh, err := os.Open(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "string("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(v, ")"))
				if err != nil {
					t.Fatalf("%s: %v", f.Name(), err)
				}
				vals = append(vals, s)
			}
		}
		fh.Close()
		if len(vals) != 2 {
			t.Fatalf("%s: %d values", f.Name(), len(vals))
		}
		if !strings.HasPrefix(vals[1], "/") {
			vals[1] = "/" + vals[1] // as FuzzClassify does
		}
		out = append(out, [2]string{vals[0], vals[1]})
	}
	return out
}

// keyPaths are the shapes the classifier maps to each key of the test topology: cluster-scoped and
// namespaced, with and without a name, subresources with more segments after them, the legacy watch
// and proxy prefixes, trailing slashes and the watch parameter.
func keyPaths(f *fixture) []string {
	var out []string
	for _, s := range f.top.Skewed() {
		k := s.Key
		p := "/apis/" + k.Group + "/" + k.Version + "/"
		if k.Group == "" {
			p = "/api/" + k.Version + "/"
		}
		for _, pre := range []string{"", "watch/", "proxy/"} {
			for _, ns := range []string{"", "namespaces/ns1/", "namespaces/status/"} {
				base := p + pre + ns + k.Resource
				if k.Subresource != "" {
					out = append(out, base+"/n1/"+k.Subresource, base+"/n1/"+k.Subresource+"/x/y", base+"/n1/"+k.Subresource+"/")
					continue
				}
				out = append(out, base, base+"/", base+"/n1", base+"/n1/", base+"?watch=true", base+"?watch=false",
					base+"?watch=0&watch=1", base+"?watch", base+"?resourceVersion=1&watch=TRUE", base+"/n1?watch=1",
					base+"/n1/unknown", base+"x", base+"/n1/status")
			}
		}
	}
	return out
}

func TestRouteTableMatchesDecisionTable(t *testing.T) {
	f := newFixture(t)
	counts := map[string]int{}
	check := func(method, path string) {
		for _, anon := range []bool{false, true} {
			for _, up := range []bool{false, true} {
				counts[f.verdict(t, request{method: method, path: path, anonymous: anon, upgrade: up})]++
			}
		}
	}
	for _, s := range classifierSeeds {
		check(s.method, s.path)
	}
	for _, s := range fuzzCorpus(t) {
		check(s[0], s[1])
	}
	for _, p := range []string{"/api/v1/watch", "/apis/gadgets.example.com/v1/watch", "/apis/gadgets.example.com/v1/gadgets/%zz",
		"/apis/gadgets.example.com/v1/namespaces/%e/gadgets", "/api/v1/widgets/n%"} {
		check("GET", p)
	}
	// Paths the connection manager normalizes (percent-encoded unreserved characters decoded, "..;"
	// and "%2e%2e" segments, backslashes, "//.." canonicalized before slashes merge) go where the
	// apiserver, which decodes them too, takes them; an escaped NUL is refused before both.
	for _, p := range []string{"/apis/%61dmissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v1/%6Dutatingadmissionpolicies/p",
		"/apis/admissionregistration.k8s.io/v1/x/..;/mutatingadmissionpolicies",
		"/apis\\admissionregistration.k8s.io\\v1\\mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v1/x//../mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v2/%2e%2e/v1/mutatingadmissionpolicies",
		"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/%00"} {
		for _, m := range []string{"GET", "POST", "DELETE"} {
			check(m, p)
		}
	}
	for _, p := range keyPaths(f) {
		for _, m := range methods {
			check(m, p)
		}
	}
	t.Logf("compared: %v", counts)
	// Every kind of decision was compared, not just the default.
	for _, k := range []string{"routed", "503", "default", "invalid"} {
		if counts[k] < 8 {
			t.Errorf("only %d %s comparisons", counts[k], k)
		}
	}
}

func FuzzRouteTableMatchesDecisionTable(f *testing.F) {
	fx := newFixture(f)
	for _, s := range classifierSeeds {
		f.Add(s.method, s.path, false, false)
	}
	for _, p := range keyPaths(fx) {
		f.Add("GET", p, true, false)
		f.Add("POST", p, false, true)
	}
	f.Fuzz(func(t *testing.T, method, path string, anonymous, upgrade bool) {
		if len(path) > 0 && path[0] != '/' {
			path = "/" + path
		}
		if len(path) > 512 || method == "" || strings.ContainsAny(method, " \t\r\n:") {
			return // Envoy's codecs refuse such methods; long paths add nothing the short ones do not
		}
		fx.verdict(t, request{method: method, path: path, anonymous: anonymous, upgrade: upgrade})
	})
}
