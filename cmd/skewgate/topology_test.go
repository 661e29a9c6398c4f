package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve"
	"github.com/skewgate/skewgate/xds"
)

// TestPrintTopologyShowsOpenAPI: `skewgate topology` lists the OpenAPI documents that do not take
// the default route, with the cluster Envoy's route table uses, and says which are merged.
func TestPrintTopologyShowsOpenAPI(t *testing.T) {
	v := serve.TopologyView{OpenAPI: []discovery.OpenAPIKeyDecision{
		{Key: "apis/apps/v1", OpenAPIDecision: discovery.OpenAPIDecision{Action: discovery.ActionRoute, Set: "new", Hash: "E6837BF046F7D2603C"}},
		{Key: "apis/x.io/v1", OpenAPIDecision: discovery.OpenAPIDecision{Action: discovery.ActionServe, Set: "old", Hash: "0123456789ABCDEF"}},
		{Key: "apis/evil.example.com/v1", OpenAPIDecision: discovery.OpenAPIDecision{Action: discovery.ActionRoute, Set: "new", Hash: "2DD4EA89A55C"},
			Why: "routed only: an aggregated APIService serves it (its server can answer skewgate alone)\x1b[2J"},
	}}
	var b bytes.Buffer
	if err := printTopology(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"/openapi/v3/apis/apps/v1", "E6837BF046F7", "route", "skewgate-upstream-new", "serve", "merged at the front; failing open skewgate-upstream-old",
		"/openapi/v3/apis/evil.example.com/v1", "routed only: an aggregated APIService serves it (its server can answer skewgate alone)?[2J"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a control character of a reason reached the terminal:\n%q", out)
	}
	if strings.Contains(out, "E6837BF046F7D") {
		t.Errorf("hash not shortened to 12 characters:\n%s", out)
	}
}

// TestPrintTopologyShowsUnexpressed: `skewgate topology` lists the rows Envoy's route table cannot
// carry (a skewed key, an OpenAPI document), with the reason and where they go failing open.
func TestPrintTopologyShowsUnexpressed(t *testing.T) {
	key := discovery.ResourceKey{Group: "g.example.com", Version: "v1", Resource: "watch"}
	v := serve.TopologyView{Unexpressed: []xds.UnexpressedKey{{Key: key, Reason: `resource "watch" is read as a verb prefix`},
		{OpenAPI: "apis/x/v1/", Reason: "not a normalized path"}}}
	var b bytes.Buffer
	if err := printTopology(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"DECIDED WITHOUT A ROUTE IN ENVOY", key.String(), `resource "watch" is read as a verb prefix`, "failing open it takes the default route",
		"/openapi/v3/apis/x/v1/", "not a normalized path (ext_proc decides it; failing open it takes the schema routes)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPrintTopologySaysWhoDecides: the header says whether ext_proc decides with the Topology shown
// and names discovery's newer one.
func TestPrintTopologySaysWhoDecides(t *testing.T) {
	for _, c := range []struct {
		v    serve.TopologyView
		want string
	}{
		{serve.TopologyView{Version: "t-1", Deciding: false, Discovered: "t-1"}, "Envoy's route table decides"},
		{serve.TopologyView{Version: "t-1", Deciding: true, Discovered: "t-2"}, "discovery's newer t-2 waits"},
		{serve.TopologyView{Version: "t-2", Deciding: true, Discovered: "t-2"}, "ext_proc decides with this Topology, discovery's newest"},
	} {
		var b bytes.Buffer
		if err := printTopology(&b, c.v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%+v: output lacks %q:\n%s", c.v, c.want, b.String())
		}
	}
}
