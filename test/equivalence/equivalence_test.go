// Package equivalence guards the route emitter: Envoy's route table (xds) against the decision
// table it is emitted from (decision), which ext_proc answers from. For every request shape, the
// route the test data plane's matcher picks from the generated route table (what a request keeps
// when ext_proc fails open) and the table's answer name the same cluster or the same 503.
package equivalence

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/xds"
)

func options() xds.Options {
	return xds.Options{
		ServingCertFile: "/etc/skewgate/front/tls.crt", ServingKeyFile: "/etc/skewgate/front/tls.key",
		ClientCAFile: "/etc/kubernetes/pki/ca.crt", UpstreamCAFile: "/etc/kubernetes/pki/ca.crt",
		FrontProxyCertFile: "/etc/kubernetes/pki/front-proxy-client.crt", FrontProxyKeyFile: "/etc/kubernetes/pki/front-proxy-client.key",
		ExtProcAddress: "127.0.0.1:18001",
	}
}

// outcome is where a request ends: a cluster, or a status Envoy or ext_proc answers itself.
type outcome struct {
	cluster string
	status  int
	route   string // the route the table chose, for messages
}

func (o outcome) String() string {
	if o.cluster != "" {
		return o.cluster
	}
	return fmt.Sprint(o.status)
}

func isSkewRoute(name string) bool {
	return strings.HasPrefix(name, "skew:") || strings.HasPrefix(name, "anonymous-skew:")
}

type fixture struct {
	top   *discovery.Topology
	table *routev3.RouteConfiguration // as served
}

func newFixture(t testing.TB) *fixture {
	top := testTopology()
	rs, err := xds.Translate(top, options())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rs.Routes[0].VirtualHosts[0].Routes, func(r *routev3.Route) bool { return isSkewRoute(r.Name) }) {
		t.Fatal("the route table has no skew routes")
	}
	return &fixture{top: top, table: rs.Routes[0]}
}

// request is one request as it reaches the connection manager.
type request struct {
	method, path       string
	anonymous, upgrade bool
}

func (r request) header() http.Header {
	h := http.Header{}
	if !r.anonymous {
		h.Set("Authorization", "Bearer token") // a credential: the route is not the anonymous twin
	}
	if r.upgrade {
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
	}
	return h
}

// failOpen is what Envoy's table decides alone.
func (f *fixture) failOpen(t testing.TB, r request, path string) outcome {
	rt := dataplane.SelectRoute(f.table, r.method, path, r.header())
	if rt == nil {
		t.Fatalf("%+v: no route", r)
	}
	if dr := rt.GetDirectResponse(); dr != nil {
		return outcome{status: int(dr.Status), route: rt.Name}
	}
	c := rt.GetRoute().GetCluster()
	if c == "" {
		t.Fatalf("%+v: route %s names no cluster", r, rt.Name)
	}
	return outcome{cluster: c, route: rt.Name}
}

// decided is the decision table's answer to the request (what ext_proc answers): a 400 for what the
// classifier refuses, a 503, or the cluster it names (twin included).
func (f *fixture) decided(t testing.TB, r request, path string) outcome {
	c, err := decision.Classify(r.method, path)
	if err != nil {
		return outcome{status: http.StatusBadRequest}
	}
	a := f.top.Table().Decide(decision.Request{Method: r.method, Path: path, Anonymous: r.anonymous, Upgrade: r.upgrade, Class: c})
	if a.Action == decision.ActionUnavailable {
		return outcome{status: http.StatusServiceUnavailable}
	}
	if a.Cluster == "" {
		t.Fatalf("%+v: the table names no cluster: %+v", r, a)
	}
	return outcome{cluster: a.Cluster}
}

// verdict compares the two for one request; it returns what was compared ("routed", "503",
// "default", "invalid") or a reason the request is not compared.
func (f *fixture) verdict(t testing.TB, r request) string {
	t.Helper()
	path, ok := canonical(r.path)
	if !ok {
		return "refused by the codec"
	}
	got := f.failOpen(t, r, path)
	want := f.decided(t, r, path)
	c, cerr := decision.Classify(r.method, path)
	switch {
	case want.status == http.StatusBadRequest:
		// The classifier refuses it (ext_proc answers 400). A skew route may take it only for an invalid
		// percent-escape, which every apiserver refuses (400) before any handler: Go's server
		// cannot unescape the path.
		p, _, _ := strings.Cut(path, "?")
		if _, err := url.PathUnescape(p); isSkewRoute(got.route) && err == nil {
			t.Errorf("%+v (path %q): ext_proc refuses it (400), the table routes it by %s to %v", r, path, got.route, got)
		}
		return "invalid"
	case cerr == nil && c.Kind == decision.Discovery:
		// ext_proc answers discovery at the front; failing open, an apiserver answers its own.
		if isSkewRoute(got.route) {
			t.Errorf("%+v: discovery path taken by %s", r, got.route)
		}
		return "discovery"
	case cerr == nil && c.Verb == "proxy":
		// The legacy /proxy/ prefix: no apiserver serves it any more, the table has no route for it.
		if isSkewRoute(got.route) {
			t.Errorf("%+v: legacy proxy path taken by %s", r, got.route)
		}
		return "legacy proxy prefix"
	case encodedSlash(path):
		// %2F inside a segment: the apiserver splits at it, Envoy's patterns do not (documented).
		return "encoded slash"
	case queryAmbiguous(path) && c.Kind == decision.Resource && f.top.Decide(c.Key, "list") != f.top.Decide(c.Key, "watch"):
		// ';', '+' and invalid escapes in the query: Go drops or decodes such pairs, Envoy does not.
		return "query Envoy parses differently"
	}
	if got.cluster != want.cluster || got.status != want.status {
		t.Errorf("%+v (path %q): Envoy's route table picks %v (route %s), the decision table %v", r, path, got, got.route, want)
	}
	switch {
	case want.status == http.StatusServiceUnavailable:
		return "503"
	case isSkewRoute(got.route):
		return "routed"
	}
	return "default"
}

// canonical is the path as Envoy's codec and normalize_path leave it: control characters and
// spaces refused, a fragment refused (http_reject_path_with_fragment), other bytes outside printable
// ASCII percent-encoded (url::CanonicalizePath), then normalized as the data plane does (which
// refuses an escaped NUL with 400, before any route or ext_proc).
func canonical(p string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c <= ' ' || c == 0x7f || c == '#':
			return "", false
		case c >= 0x80:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 || b.String()[0] != '/' {
		return "", false
	}
	return dataplane.NormalizeRequestPath(b.String())
}

func encodedSlash(path string) bool {
	p, _, _ := strings.Cut(path, "?")
	return strings.Contains(strings.ToLower(p), "%2f")
}

func queryAmbiguous(path string) bool {
	_, q, _ := strings.Cut(path, "?")
	return strings.ContainsAny(q, ";+%")
}
