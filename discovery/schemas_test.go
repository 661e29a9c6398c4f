package discovery

import (
	"testing"
	"time"
)

func withVersion(f UpstreamFacts, v string) UpstreamFacts {
	f.Version = v
	return f
}

// TestDecideSchemas: schema requests go to the upstreams that serve the most resources, the newest
// of them; to every upstream when that is all of them, or when none of that group is ready.
func TestDecideSchemas(t *testing.T) {
	route := func(s SetID) Decision { return Decision{Action: ActionRoute, Set: s} }
	for _, tc := range []struct {
		name  string
		facts []UpstreamFacts
		want  Decision
		sets  int
	}{
		{"one version", []UpstreamFacts{withVersion(upstream("a", true, true), "v1.36.3"), withVersion(upstream("b", true, true), "v1.36.3")}, Decision{}, 0},
		{"skewed", []UpstreamFacts{withVersion(upstream("old", true, false), "v1.35.4"), withVersion(upstream("new", true, true), "v1.36.3")}, route("new"), 0},
		{"two new, one old", []UpstreamFacts{withVersion(upstream("a", true, false), "v1.35.4"), withVersion(upstream("b", true, true), "v1.36.3"), withVersion(upstream("c", true, true), "v1.36.3")}, route("b,c"), 1},
		// Same resources, another version: the newest describes them (and its schemas may be richer).
		{"same resources, newer patch", []UpstreamFacts{withVersion(upstream("a", true, true), "v1.36.2"), withVersion(upstream("b", true, true), "v1.36.3")}, route("b"), 0},
		{"most capable not ready", []UpstreamFacts{withVersion(upstream("old", true, false), "v1.35.4"), withVersion(upstream("new", false, true), "v1.36.3")}, Decision{}, 0},
		{"unparsable version loses", []UpstreamFacts{withVersion(upstream("a", true, true), "garbage"), withVersion(upstream("b", true, true), "v1.30.0")}, route("b"), 0},
		// The new version only removed an API: the old one serves everything and wins.
		{"newest only removed an API", []UpstreamFacts{withVersion(upstream("old", true, true), "v1.35.4"), withVersion(upstream("new", true, false), "v1.36.3")}, route("old"), 0},
		// Nobody serves everything (new removed the core API old serves, and added one): the newest wins.
		{"nobody serves everything", []UpstreamFacts{withVersion(upstream("old", true, false), "v1.35.4"),
			{Upstream: Upstream{Name: "new", Ready: true, Version: "v1.36.3"}, APIs: apisDoc(true)}}, route("new"), 0},
		// A newer version that serves less than an older full one: the full one wins.
		{"full beats newer", []UpstreamFacts{withVersion(upstream("a", true, true), "v1.35.4"), withVersion(upstream("b", true, true), "v1.35.4"), withVersion(upstream("c", true, false), "v1.36.3")}, route("a,b"), 1},
		{"none", nil, Decision{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := Build("t-1", time.Now(), tc.facts)
			if got := top.DecideSchemas(); got != tc.want {
				t.Errorf("DecideSchemas() = %+v, want %+v", got, tc.want)
			}
			if len(top.Sets) != tc.sets {
				t.Errorf("sets %+v, want %d (a routed group of several is a set, so xds makes its cluster)", top.Sets, tc.sets)
			}
		})
	}
}
