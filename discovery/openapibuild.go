package discovery

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/skewgate/skewgate/openapi"
)

// coverageByGV is, per group-version of the merged discovery, who serves every one of its resource
// keys (subresources included) and how many of them each upstream serves.
func coverageByGV(caps map[ResourceKey]*capability, n int) openapi.Coverage {
	out := openapi.Coverage{}
	for key, c := range caps {
		gv := key.Group + "/" + key.Version
		cov := out[gv]
		if cov == nil {
			cov = &openapi.GVCoverage{All: openapi.Members(slices.Clone(c.servers)), Count: make([]int, n)}
			out[gv] = cov
		}
		for w := range cov.All {
			cov.All[w] &= c.servers[w]
		}
		for i := range n {
			if c.servers.has(i) {
				cov.Count[i]++
			}
		}
	}
	return out
}

// buildOpenAPI decides the proven upstreams' OpenAPI v3 keys (openapi.Decide, merging through memo,
// nil: no memo) and names each decision's upstreams by a SetID. facts are the proven upstreams in
// Build's order, caps the merged discovery's resource keys; setFor names a group of upstreams,
// recording it in Topology.Sets when it has several members.
func buildOpenAPI(now time.Time, facts []UpstreamFacts, caps map[ResourceKey]*capability, ready bitset, setFor func(bitset) SetID, memo *openapi.Memo) openAPIView {
	ups := make([]openapi.Upstream, len(facts))
	listed := false
	for i, f := range facts {
		v, _ := utilversion.ParseGeneric(f.Version)
		ups[i] = openapi.Upstream{Name: f.Name, Version: v, Ready: ready.has(i), Index: f.OpenAPI, Docs: f.OpenAPIDocs, Aggregated: f.AggregatedAPIs}
		listed = listed || f.OpenAPI != nil && len(f.OpenAPI.Keys) > 0
	}
	if !listed {
		return openAPIView{}
	}
	res := openapi.Decide(now, ups, coverageByGV(caps, len(facts)), memo)
	view := openAPIView{index: res.Index, merged: res.Merged, wants: res.Wants, degraded: res.Degraded, routed: res.Routed,
		decisions: make(map[string]OpenAPIDecision, len(res.Decisions))}
	for key, d := range res.Decisions {
		od := OpenAPIDecision{Action: openAPIActions[d.Action], Hash: d.Hash}
		if d.Members != nil {
			od.Set = setFor(bitset(d.Members))
		}
		view.decisions[key] = od
	}
	return view
}

var openAPIActions = [...]Action{
	openapi.ActionDefault:     ActionDefault,
	openapi.ActionRoute:       ActionRoute,
	openapi.ActionUnavailable: ActionUnavailable,
	openapi.ActionServe:       ActionServe,
}

// aggregatedAPIs returns the group-versions of the APIServices that may name a service
// (openapi.AggregatedAPIs).
func aggregatedAPIs(apiServices []*metav1.PartialObjectMetadata) []string {
	return openapi.AggregatedAPIs(apiServices)
}

// allAggregated stands for every group-version in UpstreamFacts.AggregatedAPIs (openapi.AllAggregated).
const allAggregated = openapi.AllAggregated
