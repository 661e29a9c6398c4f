package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/app"
	"github.com/skewgate/skewgate/xds"
)

// TestPrintTopologyShowsOpenAPI: `skewgate topology` lists the OpenAPI documents that do not take
// the default route, with the cluster Envoy's route table uses, and says which are merged.
func TestPrintTopologyShowsOpenAPI(t *testing.T) {
	v := app.TopologyView{OpenAPI: []discovery.OpenAPIKeyDecision{
		{Key: "apis/apps/v1", OpenAPIDecision: discovery.OpenAPIDecision{Action: discovery.ActionRoute, Set: "new", Hash: "E6837BF046F7D2603C"}},
		{Key: "apis/x.io/v1", OpenAPIDecision: discovery.OpenAPIDecision{Action: discovery.ActionServe, Set: "old", Hash: "0123456789ABCDEF"}},
	}}
	var b bytes.Buffer
	if err := printTopology(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"/openapi/v3/apis/apps/v1", "E6837BF046F7", "route", "skewgate-upstream-new", "serve", "merged at the front; failing open skewgate-upstream-old"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "E6837BF046F7D") {
		t.Errorf("hash not shortened to 12 characters:\n%s", out)
	}
}

// TestPrintTopologyShowsUnexpressed: `skewgate topology` lists the skewed keys Envoy's route table
// cannot carry, with the reason.
func TestPrintTopologyShowsUnexpressed(t *testing.T) {
	key := discovery.ResourceKey{Group: "g.example.com", Version: "v1", Resource: "watch"}
	v := app.TopologyView{Unexpressed: []xds.UnexpressedKey{{Key: key, Reason: `resource "watch" is read as a verb prefix`}}}
	var b bytes.Buffer
	if err := printTopology(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"SKEWED RESOURCE WITHOUT A ROUTE IN ENVOY", key.String(), `resource "watch" is read as a verb prefix`, "failing open it takes the default route"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
