package xds

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/openapitest"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

// capturedIndex reads the /openapi/v3 index a testbed apiserver served (discovery/testdata/openapi).
func capturedIndex(t testing.TB, version string) *discovery.OpenAPIIndex {
	t.Helper()
	var idx struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapitest.File(t, version, "index"), &idx); err != nil {
		t.Fatal(err)
	}
	out := &discovery.OpenAPIIndex{Keys: map[string]string{}, Hash: version}
	for k, p := range idx.Paths {
		u, err := url.Parse(p.ServerRelativeURL)
		if err != nil {
			t.Fatal(err)
		}
		out.Keys[k] = u.Query().Get("hash")
	}
	return out
}

// routeIndex returns the position of the first route whose name satisfies f, or -1.
func routeIndex(rs []*routev3.Route, f func(string) bool) int {
	return slices.IndexFunc(rs, func(r *routev3.Route) bool { return f(r.Name) })
}

// TestOpenAPIRoutesCapturedSkew: the captured v1.35.4 and v1.36.3 indexes differ in every key (48);
// each gets an exact-path route and its anonymous twin to the v1.36 server, after the resource skew
// routes and before the schema routes.
func TestOpenAPIRoutesCapturedSkew(t *testing.T) {
	core := xdstest.Doc(t, "testdata", "core")
	facts := []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "old", Address: "10.0.0.1:6443", Ready: true, Version: "v1.35.4", Source: discovery.SourceStatic},
			API: core, APIs: xdstest.Doc(t, "testdata", "apis-v1.35"), OpenAPI: capturedIndex(t, "v1.35.4")},
		{Upstream: discovery.Upstream{Name: "new", Address: "10.0.0.2:6443", Ready: true, Version: "v1.36.3", Source: discovery.SourceStatic},
			API: core, APIs: xdstest.Doc(t, "testdata", "apis-v1.36"), OpenAPI: capturedIndex(t, "v1.36.3")},
	}
	top := discovery.Build("captured", time.Unix(0, 0), facts)
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	routes := rs.Routes[0].VirtualHosts[0].Routes
	ds := top.OpenAPIDecisions()
	if len(ds) != 48 {
		t.Fatalf("%d non-default OpenAPI keys, want the 48 the captured indexes differ in", len(ds))
	}
	var got []*routev3.Route
	for _, r := range routes {
		if strings.HasPrefix(r.Name, "openapi:") || strings.HasPrefix(r.Name, "anonymous-openapi:") {
			got = append(got, r)
		}
	}
	if len(got) != 2*len(ds) {
		t.Fatalf("%d OpenAPI routes, want %d", len(got), 2*len(ds))
	}
	newOnly := wire.UpstreamCluster("new")
	for i, d := range ds {
		anon, plain := got[2*i], got[2*i+1]
		if d.Action != discovery.ActionRoute || d.Set != discovery.SetID("new") {
			t.Errorf("%s: %+v, want routed to new", d.Key, d.OpenAPIDecision)
		}
		if plain.Name != "openapi:"+d.Key || plain.Match.GetPath() != "/openapi/v3/"+d.Key || plain.GetRoute().GetCluster() != newOnly {
			t.Errorf("%s: route %s %s -> %s", d.Key, plain.Name, plain.Match.GetPath(), plain.GetRoute().GetCluster())
		}
		if anon.Name != "anonymous-"+plain.Name || anon.Match.GetPath() != plain.Match.GetPath() || anon.GetRoute().GetCluster() != wire.AnonCluster(newOnly) {
			t.Errorf("%s: twin %s %s -> %s", d.Key, anon.Name, anon.Match.GetPath(), anon.GetRoute().GetCluster())
		}
		if h := plain.Match.GetHeaders(); len(h) != 1 || h[0].Name != "upgrade" || h[0].GetPresentMatch() {
			t.Errorf("%s: headers %v, want upgrades excluded", d.Key, h)
		}
	}
	firstOpenAPI := routeIndex(routes, func(n string) bool { return strings.Contains(n, "openapi:") })
	lastSkew := -1
	for i, r := range routes {
		if strings.Contains(r.Name, "skew:") {
			lastSkew = i
		}
	}
	schemas := routeIndex(routes, func(n string) bool { return strings.Contains(n, "schemas") || strings.Contains(n, "discovery:") })
	if !(lastSkew < firstOpenAPI && firstOpenAPI+len(got) == schemas) {
		t.Errorf("order: last skew route %d, OpenAPI routes %d..%d, first schema route %d", lastSkew, firstOpenAPI, firstOpenAPI+len(got)-1, schemas)
	}
}

// TestOpenAPIRoutesBounded: however many keys the indexes hold, the table gains at most
// maxOpenAPIRouteKeys routes (and their twins); keys Envoy's normalized path could not equal get none.
func TestOpenAPIRoutesBounded(t *testing.T) {
	a, b := map[string]string{}, map[string]string{}
	for i := range maxOpenAPIRouteKeys + 100 {
		k := fmt.Sprintf("apis/g%05d.example/v1", i)
		a[k], b[k] = "A", "B"
	}
	a["apis/x/v1/"], b["apis/x/v1/"] = "A", "B"
	core, apis := xdstest.Doc(t, "testdata", "core"), xdstest.Doc(t, "testdata", "apis-v1.36")
	facts := []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "old", Ready: true, Version: "v1.35.4"}, API: core, APIs: apis, OpenAPI: &discovery.OpenAPIIndex{Keys: a, Hash: "a"}},
		{Upstream: discovery.Upstream{Name: "new", Ready: true, Version: "v1.36.3"}, API: core, APIs: apis, OpenAPI: &discovery.OpenAPIIndex{Keys: b, Hash: "b"}},
	}
	tb := &translator{top: discovery.Build("many", time.Unix(0, 0), facts)}
	if n := len(tb.top.OpenAPIDecisions()); n != maxOpenAPIRouteKeys+101 {
		t.Fatalf("%d decisions", n)
	}
	all, unexpressed, err := tb.emitRows(nil)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*routev3.Route
	for _, r := range all {
		if strings.HasPrefix(r.Name, "openapi:") {
			rs = append(rs, r)
		}
	}
	if len(rs) != maxOpenAPIRouteKeys {
		t.Errorf("%d routes, want the cap %d", len(rs), maxOpenAPIRouteKeys)
	}
	// Nothing is dropped silently: the 100 keys past the cap and the one an exact match cannot meet
	// are listed, with why.
	var listed []string
	for _, u := range unexpressed {
		if u.OpenAPI != "" {
			listed = append(listed, u.OpenAPI)
		}
	}
	if len(listed) != 101 || listed[0] != fmt.Sprintf("apis/g%05d.example/v1", maxOpenAPIRouteKeys) || listed[100] != "apis/x/v1/" {
		t.Errorf("%d unexpressed OpenAPI keys (%v ... %v), want the 100 past the cap and apis/x/v1/", len(listed), listed[:min(1, len(listed))], listed[max(0, len(listed)-1):])
	}
	for _, r := range rs {
		if strings.HasSuffix(r.Match.GetPath(), "/") {
			t.Errorf("route for a key with an empty segment: %s", r.Match.GetPath())
		}
	}
}

func TestRoutableOpenAPIKey(t *testing.T) {
	for key, want := range map[string]bool{
		"api/v1": true, "apis/apps/v1": true, "version": true, ".well-known/openid-configuration": true,
		"apis/admissionregistration.k8s.io/v1": true, "logs": true,
		"": false, "apis/x/v1/": false, "/apis/x": false, "apis//x": false, "apis/../x": false, "apis/./x": false,
		"apis/a%2Fb/v1": false, "apis/a b/v1": false, "apis/x?y/v1": false, "apis/x#y/v1": false, "apis/\xff/v1": false,
	} {
		if got := routableOpenAPIKey(key); got != want {
			t.Errorf("routableOpenAPIKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestOpenAPIRoutesServe: a key the front merges is routed, failing open, to the decision's fallback
// set (one apiserver's own document under its own hash), as ext_proc routes what it does not answer.
func TestOpenAPIRoutesServe(t *testing.T) {
	const key = xdstest.ServedKey
	top := xdstest.Served(t, "testdata")
	d := top.DecideOpenAPI(key)
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	routes := rs.Routes[0].VirtualHosts[0].Routes
	i := routeIndex(routes, func(n string) bool { return n == "openapi:"+key })
	if i < 0 || routes[i].GetRoute().GetCluster() != wire.SetCluster(d.Set.Members()) || routes[i].Match.GetPath() != "/openapi/v3/"+key {
		t.Fatalf("no route for %s to its fallback %v", key, d.Set)
	}
}
