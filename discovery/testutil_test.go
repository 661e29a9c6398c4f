package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// res is a resource with verbs and optional subresources (name:verb,verb).
func res(name string, verbs []string, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{Resource: name, Verbs: verbs, Scope: apidiscoveryv2.ScopeNamespace, Subresources: subs}
}

func sub(name string, verbs ...string) apidiscoveryv2.APISubresourceDiscovery {
	return apidiscoveryv2.APISubresourceDiscovery{Subresource: name, Verbs: verbs}
}

func group(name string, versions ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	g := apidiscoveryv2.APIGroupDiscovery{Versions: versions}
	g.Name = name
	return g
}

func version(v string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

var allVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// coreDoc serves pods (with exec, status) and configmaps.
func coreDoc() *Document {
	return &Document{Hash: "core", Groups: []apidiscoveryv2.APIGroupDiscovery{group("", version("v1",
		res("configmaps", allVerbs),
		res("pods", allVerbs, sub("exec", "create", "get"), sub("status", "get", "patch", "update")),
	))}}
}

// apisDoc is a v1.35-like /apis; withMAP adds v1.36's mutatingadmissionpolicies.
func apisDoc(withMAP bool) *Document {
	rs := []apidiscoveryv2.APIResourceDiscovery{res("validatingadmissionpolicies", allVerbs, sub("status", "get", "patch", "update"))}
	hash := "apis-135"
	if withMAP {
		rs = append(rs, res("mutatingadmissionpolicies", allVerbs), res("mutatingadmissionpolicybindings", allVerbs))
		hash = "apis-136"
	}
	return &Document{Hash: hash, Groups: []apidiscoveryv2.APIGroupDiscovery{
		group("apps", version("v1", res("deployments", allVerbs, sub("scale", "get", "patch", "update")))),
		group("admissionregistration.k8s.io", version("v1", rs...)),
	}}
}
