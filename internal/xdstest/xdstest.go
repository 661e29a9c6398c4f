// Package xdstest builds the Topologies of xds's translation cases for the tests that read them:
// xds's own (golden files, ADS, the ACK gate) and test/equivalence's guard of the route emitter, which
// runs on the very Topology whose route table xds's golden file records. A case is a scenario file
// (testdata/<case>.in.yaml) with the discovery documents it names in docs/ beside it; the callers
// name the folder, so the cases stay where their golden files are. Only tests import it.
package xdstest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/openapitest"
	"github.com/skewgate/skewgate/openapi"
)

// scenario is a <case>.in.yaml: the upstreams discovery learnt.
type scenario struct {
	Upstreams []struct {
		Name     string `json:"name"`
		Address  string `json:"address"`
		Ready    bool   `json:"ready"`
		APIs     string `json:"apis"`
		Departed bool   `json:"departed"`
		Version  string `json:"version"`
		// OpenAPI is the upstream's /openapi/v3 index: key -> hash.
		OpenAPI map[string]string `json:"openapi"`
	} `json:"upstreams"`
}

// Scenario builds the Topology the scenario file at path describes; the /apis documents it names
// (apis: v1.36 is docs/apis-v1.36.json) and the /api document (docs/core.json) are read from the
// docs folder beside it.
func Scenario(t testing.TB, path string) *discovery.Topology {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	if err := yaml.UnmarshalStrict(data, &sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dir := filepath.Dir(path)
	core := Doc(t, dir, "core")
	var facts []discovery.UpstreamFacts
	for _, u := range sc.Upstreams {
		f := discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: u.Name, Address: u.Address, Ready: u.Ready, Source: discovery.SourceStatic, Version: u.Version},
			Departed: u.Departed,
		}
		if u.OpenAPI != nil {
			f.OpenAPI = &discovery.OpenAPIIndex{Keys: u.OpenAPI, Hash: u.Name}
		}
		if u.APIs != "" {
			f.API, f.APIs = core, Doc(t, dir, "apis-"+u.APIs)
		}
		facts = append(facts, f)
	}
	return discovery.Build("golden", time.Unix(0, 0), facts)
}

// Doc reads the discovery document dir/docs/<name>.json.
func Doc(t testing.TB, dir, name string) *discovery.Document {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "docs", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := discovery.ParseDocument(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// ServedKey is the OpenAPI key the front merges in Served's Topology.
const ServedKey = "apis/admissionregistration.k8s.io/v1"

// Served is the Topology of old (v1.35.4) and new (v1.36.3, without validatingadmissionpolicies)
// with their captured admissionregistration.k8s.io/v1 documents (ServedKey); nobody serves the
// whole group-version, so the front merges them. Their discovery documents are read from
// dir/docs.
func Served(t testing.TB, dir string) *discovery.Topology {
	t.Helper()
	core := Doc(t, dir, "core")
	var facts []discovery.UpstreamFacts
	for _, u := range []struct{ name, address, version, apis string }{
		{"old", "10.0.0.1:6443", "v1.35.4", "v1.35"}, {"new", "10.0.0.2:6443", "v1.36.3", "v1.36"},
	} {
		data := openapitest.Doc(t, u.version, ServedKey)
		spec := &discovery.OpenAPISpec{JSON: data, Hash: openapi.Hash(data)}
		apis := Doc(t, dir, "apis-"+u.apis)
		if u.name == "new" {
			apis = WithoutResource(apis, "validatingadmissionpolicies")
		}
		facts = append(facts, discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: u.name, Address: u.address, Ready: true, Version: u.version, Source: discovery.SourceStatic},
			API:      core, APIs: apis,
			OpenAPI:     &discovery.OpenAPIIndex{Keys: map[string]string{ServedKey: spec.Hash}, Hash: u.name},
			OpenAPIDocs: map[string]*discovery.OpenAPISpec{ServedKey: spec},
		})
	}
	top := discovery.Build("served", time.Unix(0, 0), facts)
	if d := top.DecideOpenAPI(ServedKey); d.Action != discovery.ActionServe {
		t.Fatalf("%+v, want served (merged)", d)
	}
	return top
}

// WithoutResource returns a copy of d without the resource in any group.
func WithoutResource(d *discovery.Document, resource string) *discovery.Document {
	out := &discovery.Document{Hash: d.Hash + "-" + resource, Groups: slices.Clone(d.Groups)}
	for gi := range out.Groups {
		out.Groups[gi].Versions = slices.Clone(out.Groups[gi].Versions)
		for vi := range out.Groups[gi].Versions {
			v := &out.Groups[gi].Versions[vi]
			v.Resources = slices.DeleteFunc(slices.Clone(v.Resources), func(r apidiscoveryv2.APIResourceDiscovery) bool { return r.Resource == resource })
		}
	}
	return out
}
