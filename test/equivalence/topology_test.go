package equivalence

import (
	"fmt"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
)

// Three apiservers: old and new are ready, newest is not. Between them every kind of decision the
// route table has to carry: a resource on some servers (routed), on a not-ready server only
// (unavailable), verbs served by different servers (per-method routes, list and watch apart), a
// subresource served elsewhere than its resource, and the names the classifier reads specially
// (namespaces and its subresources, a resource named "status").
func testTopology() *discovery.Topology {
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	res := func(name string, verbs []string, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: verbs, Subresources: subs}
	}
	sub := func(name string, verbs ...string) apidiscoveryv2.APISubresourceDiscovery {
		return apidiscoveryv2.APISubresourceDiscovery{Subresource: name, Verbs: verbs}
	}
	group := func(name, version string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIGroupDiscovery {
		g := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: version, Resources: rs}}}
		g.Name = name
		return g
	}
	core := func(extra ...apidiscoveryv2.APIResourceDiscovery) *discovery.Document {
		rs := append([]apidiscoveryv2.APIResourceDiscovery{
			res("pods", all, sub("status", "get", "update", "patch"), sub("exec", "create", "get"), sub("log", "get")),
			res("namespaces", all, sub("status", "get", "update", "patch"), sub("finalize", "update")),
		}, extra...)
		return &discovery.Document{Groups: []apidiscoveryv2.APIGroupDiscovery{group("", "v1", rs...)}, Hash: fmt.Sprint("core", len(extra))}
	}
	oldAPIs := &discovery.Document{Hash: "old", Groups: []apidiscoveryv2.APIGroupDiscovery{
		group("apps", "v1", res("deployments", all, sub("scale", "get", "update", "patch"))),
		group("gadgets.example.com", "v1",
			res("gadgets", []string{"get", "list", "create"}, sub("status", "get", "update"))),
	}}
	newAPIs := &discovery.Document{Hash: "new", Groups: []apidiscoveryv2.APIGroupDiscovery{
		group("apps", "v1", res("deployments", all, sub("scale", "get", "update", "patch"))),
		group("admissionregistration.k8s.io", "v1", res("mutatingadmissionpolicies", all), res("mutatingadmissionpolicybindings", all)),
		group("gadgets.example.com", "v1", res("gadgets", []string{"get", "list", "watch", "create", "delete"})),
		group("edge.example.com", "v1",
			res("namespaces", all, sub("status", "get"), sub("ownership", "get")),
			res("status", all)),
	}}
	newestAPIs := &discovery.Document{Hash: "newest", Groups: []apidiscoveryv2.APIGroupDiscovery{
		group("apps", "v1", res("deployments", all, sub("scale", "get", "update", "patch"))),
		group("admissionregistration.k8s.io", "v1", res("mutatingadmissionpolicies", all), res("mutatingadmissionpolicybindings", all)),
		group("ghosts.example.com", "v1alpha1", res("ghosts", all)),
	}}
	up := func(name, addr string, ready bool, api, apis *discovery.Document) discovery.UpstreamFacts {
		return discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: name, Address: addr, Ready: ready, Source: discovery.SourceStatic},
			API:      api, APIs: apis,
		}
	}
	return discovery.Build("equivalence", time.Unix(0, 0), []discovery.UpstreamFacts{
		up("old", "10.0.0.1:6443", true, core(), oldAPIs),
		up("new", "10.0.0.2:6443", true, core(res("widgets", all)), newAPIs),
		up("newest", "10.0.0.3:6443", false, core(res("widgets", all)), newestAPIs),
	})
}
