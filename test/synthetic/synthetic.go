// Package synthetic makes Topologies of any size for benchmarks: n upstreams in a number of
// versions, each version serving a different prefix of the same resources.
package synthetic

import (
	"fmt"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
)

// Facts returns n upstreams serving about gvrs resource keys in `sets` versions: version s serves the
// first gvrs-(sets-1-s)*5 resources, so there are sets-1 capability sets besides per-upstream ones.
func Facts(n, gvrs, sets int) []discovery.UpstreamFacts {
	docs := make([]*discovery.Document, sets)
	for s := range sets {
		limit := gvrs - (sets-1-s)*5
		var groups []apidiscoveryv2.APIGroupDiscovery
		for g := 0; g*20 < limit; g++ {
			var rs []apidiscoveryv2.APIResourceDiscovery
			for r := 0; r < 20 && g*20+r < limit; r++ {
				rs = append(rs, apidiscoveryv2.APIResourceDiscovery{Resource: fmt.Sprintf("r%d", r), Scope: apidiscoveryv2.ScopeNamespace,
					Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
			}
			gd := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: rs}}}
			gd.Name = fmt.Sprintf("g%d.example.com", g)
			groups = append(groups, gd)
		}
		docs[s] = &discovery.Document{Groups: groups, Hash: fmt.Sprint("doc", s)}
	}
	core := &discovery.Document{Hash: "core"}
	facts := make([]discovery.UpstreamFacts, n)
	for i := range n {
		facts[i] = discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: fmt.Sprintf("apiserver-%04d", i), Address: fmt.Sprintf("10.%d.%d.%d:6443", i/62500, i/250%250, i%250+1), Ready: true},
			API:      core, APIs: docs[i%sets],
		}
	}
	return facts
}

// Topology builds the Topology of Facts(n, gvrs, sets).
func Topology(n, gvrs, sets int) *discovery.Topology {
	return discovery.Build("synthetic", time.Unix(0, 0), Facts(n, gvrs, sets))
}
