package discovery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

func upstream(name string, ready bool, withMAP bool) UpstreamFacts {
	return UpstreamFacts{Upstream: Upstream{Name: name, Address: name + ":6443", Ready: ready}, API: coreDoc(), APIs: apisDoc(withMAP)}
}

var (
	keyPods   = ResourceKey{Version: "v1", Resource: "pods"}
	keyMAP    = ResourceKey{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	keyExec   = ResourceKey{Version: "v1", Resource: "pods", Subresource: "exec"}
	keyNobody = ResourceKey{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func TestBuildDecisions(t *testing.T) {
	route := func(s SetID) Decision { return Decision{Action: ActionRoute, Set: s} }
	def, unavailable := Decision{}, Decision{Action: ActionUnavailable}
	threeWay := []UpstreamFacts{upstream("a", true, false), upstream("b", true, true), upstream("c", true, true)}
	type check struct {
		key  ResourceKey
		verb string
		want Decision
	}
	cases := []struct {
		name   string
		facts  []UpstreamFacts
		checks []check
		sets   int
	}{
		{"one upstream", []UpstreamFacts{upstream("a", true, true)}, []check{
			{keyPods, "get", def}, {keyMAP, "list", def}, {keyNobody, "get", def},
		}, 0},
		{"two of one version", []UpstreamFacts{upstream("a", true, true), upstream("b", true, true)}, []check{
			{keyPods, "get", def}, {keyMAP, "create", def},
		}, 0},
		{"skewed", []UpstreamFacts{upstream("old", true, false), upstream("new", true, true)}, []check{
			{keyPods, "get", def}, {keyExec, "create", def}, {keyNobody, "get", def},
			{keyMAP, "get", route("new")},
			{keyMAP, "watch", route("new")},
		}, 0},
		{"skewed, capable server not ready", []UpstreamFacts{upstream("old", true, false), upstream("new", false, true)}, []check{
			{keyPods, "get", def}, {keyMAP, "get", unavailable},
		}, 0},
		{"three upstreams, two capability sets", threeWay, []check{
			{keyPods, "list", def}, {keyMAP, "list", route("b,c")},
		}, 1},
		{"upstream without capabilities yet", []UpstreamFacts{upstream("a", true, true), {Upstream: Upstream{Name: "b", Ready: true}}}, []check{
			// b is not in the default route (xds builds it from upstreams with capabilities).
			{keyPods, "get", def}, {keyNobody, "get", def},
		}, 0},
		{"none", nil, []check{{keyPods, "get", def}}, 0},
		{"capable server departed", []UpstreamFacts{upstream("old", true, false), {Upstream: Upstream{Name: "new"}, APIs: apisDoc(true), Departed: true}}, []check{
			{keyPods, "get", def}, {keyMAP, "get", unavailable}, {keyNobody, "get", def},
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := Build("v", time.Unix(0, 0), tc.facts)
			for _, c := range tc.checks {
				if got := topo.Decide(c.key, c.verb); got != c.want {
					t.Errorf("Decide(%v, %s) = %+v, want %+v", c.key, c.verb, got, c.want)
				}
			}
			if len(topo.Sets) != tc.sets {
				t.Errorf("sets = %+v, want %d", topo.Sets, tc.sets)
			}
		})
	}
}

// A verb only some servers list routes to those; the others keep the resource-wide decision.
func TestBuildPerVerb(t *testing.T) {
	a := upstream("a", true, true)
	b := upstream("b", true, true)
	b.API = &Document{Hash: "core-no-dc", Groups: []apidiscoveryv2.APIGroupDiscovery{group("", version("v1",
		res("configmaps", []string{"get", "list"}),
		res("pods", allVerbs, sub("exec", "create", "get"), sub("status", "get", "patch", "update")),
	))}}
	topo := Build("v", time.Now(), []UpstreamFacts{a, b})
	cm := ResourceKey{Version: "v1", Resource: "configmaps"}
	if got := topo.Decide(cm, "get"); got.Action != ActionDefault {
		t.Errorf("get configmaps = %+v, want default", got)
	}
	if got := topo.Decide(cm, "create"); got != (Decision{Action: ActionRoute, Set: "a"}) {
		t.Errorf("create configmaps = %+v, want route to a", got)
	}
	skewed := topo.Skewed()
	if len(skewed) != 6 { // create, delete, deletecollection, patch, update, watch
		t.Errorf("skewed = %+v", skewed)
	}
}

func TestBuildMergedDiscovery(t *testing.T) {
	topo := Build("v", time.Now(), []UpstreamFacts{upstream("old", true, false), upstream("new", true, true)})
	var got []string
	for _, g := range topo.APIs.List.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				got = append(got, g.Name+"/"+v.Version+"/"+r.Resource)
			}
		}
	}
	want := []string{
		"apps/v1/deployments",
		"admissionregistration.k8s.io/v1/validatingadmissionpolicies",
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
	}
	if !slices.Equal(got, want) {
		t.Errorf("merged /apis = %v, want %v", got, want)
	}
	if topo.APIs.ETag == "" || topo.API.ETag == topo.APIs.ETag {
		t.Errorf("etags: api %q apis %q", topo.API.ETag, topo.APIs.ETag)
	}
	// The same upstreams in another order give the same document.
	again := Build("w", time.Now(), []UpstreamFacts{upstream("new", true, true), upstream("old", true, false)})
	if again.APIs.ETag != topo.APIs.ETag {
		t.Error("merged document depends on input order")
	}
	if fingerprint(again) != fingerprint(topo) {
		t.Error("fingerprint depends on input order or version")
	}
}

// Verbs and subresources of one resource are unioned and sorted (in-tree mergeResourceCapabilities).
func TestMergeCapabilities(t *testing.T) {
	a := &Document{Hash: "a", Groups: []apidiscoveryv2.APIGroupDiscovery{group("g", version("v1", res("r", []string{"get", "list"}, sub("status", "get"))))}}
	b := &Document{Hash: "b", Groups: []apidiscoveryv2.APIGroupDiscovery{group("g", version("v1", res("r", []string{"watch", "get"}, sub("scale", "get"))))}}
	m := mergedDocument([]*Document{a, b, nil, a})
	r := m.List.Items[0].Versions[0].Resources[0]
	if !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) || len(r.Subresources) != 2 || r.Subresources[0].Subresource != "scale" {
		t.Errorf("merged resource = %+v", r)
	}
}

func BenchmarkBuild100x600(b *testing.B) {
	facts := syntheticFacts(100, 600, 10)
	b.ReportAllocs()
	for b.Loop() {
		Build("v", time.Now(), facts)
	}
}

// syntheticFacts makes n upstreams serving about gvrs resource keys, in `sets` different versions
// (each version serves a prefix of the resources, so versions differ in what they serve).
func syntheticFacts(n, gvrs, sets int) []UpstreamFacts {
	docs := make([]*Document, sets)
	for s := range sets {
		var groups []apidiscoveryv2.APIGroupDiscovery
		per := 20
		limit := gvrs - (sets-1-s)*5 // version s serves the first `limit` resources
		for gi := 0; gi*per < limit; gi++ {
			var rs []apidiscoveryv2.APIResourceDiscovery
			for ri := 0; ri < per && gi*per+ri < limit; ri++ {
				rs = append(rs, res(fmt.Sprintf("r%d", ri), allVerbs, sub("status", "get", "patch", "update")))
			}
			groups = append(groups, group(fmt.Sprintf("g%d.example.com", gi), version("v1", rs...)))
		}
		docs[s] = &Document{Hash: fmt.Sprint("doc", s), Groups: groups}
	}
	facts := make([]UpstreamFacts, n)
	for i := range n {
		facts[i] = UpstreamFacts{Upstream: Upstream{Name: fmt.Sprintf("apiserver-%03d", i), Ready: true}, API: coreDoc(), APIs: docs[i%sets]}
	}
	return facts
}

// TestBuildIgnoresUpstreamsWithoutCapabilities: an upstream whose discovery was never fetched (just
// joined, or a Lease address that is no apiserver) is not in the default route and changes no
// decision.
func TestBuildIgnoresUpstreamsWithoutCapabilities(t *testing.T) {
	unknown := UpstreamFacts{Upstream: Upstream{Name: "unknown", Address: "unknown:6443"}}
	top := Build("v", time.Now(), []UpstreamFacts{upstream("old", true, false), upstream("new", true, true), unknown})
	if d := top.Decide(keyPods, "list"); d.Action != ActionDefault {
		t.Errorf("pods: %+v, want the default route", d)
	}
	if d := top.Decide(keyMAP, "list"); d != (Decision{Action: ActionRoute, Set: "new"}) {
		t.Errorf("mutatingadmissionpolicies: %+v, want new", d)
	}
	if len(top.Sets) != 0 {
		t.Errorf("sets %v, want none", top.Sets)
	}
}
