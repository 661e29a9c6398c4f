package flow

import (
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/xds"
)

// TestSchemaRoutesMatchExtProc: the route table's schema routes (what the API schemas take when
// ext_proc fails open) match the prefix decision.IsSchemaPath tests (what ext_proc decides with).
func TestSchemaRoutesMatchExtProc(t *testing.T) {
	group := func(resources ...string) *discovery.Document {
		g := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1"}}}
		g.Name = "apps"
		for _, r := range resources {
			g.Versions[0].Resources = append(g.Versions[0].Resources, apidiscoveryv2.APIResourceDiscovery{Resource: r, Verbs: []string{"get", "list"}})
		}
		return &discovery.Document{Hash: "apps-" + resources[len(resources)-1], Groups: []apidiscoveryv2.APIGroupDiscovery{g}}
	}
	old, neu := group("deployments"), group("deployments", "widgets")
	top := discovery.Build("t-1", time.Now(), []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "old", Address: "10.0.0.1:6443", Ready: true}, API: old, APIs: old},
		{Upstream: discovery.Upstream{Name: "new", Address: "10.0.0.2:6443", Ready: true}, API: neu, APIs: neu},
	})
	if d := top.DecideSchemas(); d.Action != discovery.ActionRoute {
		t.Fatalf("schemas decided %+v for skewed apiservers, want a route", d)
	}
	rs, err := xds.Translate(top, xds.Options{
		ServingCertFile: "/f/tls.crt", ServingKeyFile: "/f/tls.key", ClientCAFile: "/k/ca.crt", UpstreamCAFile: "/k/ca.crt",
		FrontProxyCertFile: "/k/fp.crt", FrontProxyKeyFile: "/k/fp.key", ExtProcAddress: "127.0.0.1:18001",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vh := range rs.Routes[0].GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if p := r.GetMatch().GetPathSeparatedPrefix(); p != "" {
				n++
				if p != decision.SchemaPrefix {
					t.Errorf("route %s matches path_separated_prefix %q, the decision table's schema prefix is %q", r.GetName(), p, decision.SchemaPrefix)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no schema route (path_separated_prefix) in the route table of a skewed Topology")
	}
}
