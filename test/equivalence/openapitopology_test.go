package equivalence

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

// xdsTestdata is xds's golden cases: the OpenAPI guard runs on the very Topology whose route table
// xds's golden file records.
var xdsTestdata = filepath.Join("..", "..", "xds", "testdata")

// goldenScenario builds the Topology of xds/testdata/<name>.in.yaml, as xds's golden test does.
func goldenScenario(t testing.TB, name string) *discovery.Topology {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(xdsTestdata, name+".in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Upstreams []struct {
			Name     string            `json:"name"`
			Address  string            `json:"address"`
			Ready    bool              `json:"ready"`
			APIs     string            `json:"apis"`
			Departed bool              `json:"departed"`
			Version  string            `json:"version"`
			OpenAPI  map[string]string `json:"openapi"`
		} `json:"upstreams"`
	}
	if err := yaml.UnmarshalStrict(data, &sc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	core := readDoc(t, "core")
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
			f.API, f.APIs = core, readDoc(t, "apis-"+u.APIs)
		}
		facts = append(facts, f)
	}
	return discovery.Build("golden", time.Unix(0, 0), facts)
}

func readDoc(t testing.TB, name string) *discovery.Document {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(xdsTestdata, "docs", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := discovery.ParseDocument(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// servedTopology: old (v1.35.4) and new (v1.36.3, without validatingadmissionpolicies) with their
// captured admissionregistration.k8s.io/v1 documents; nobody serves the whole group-version, so the
// front merges them.
func servedTopology(t testing.TB) *discovery.Topology {
	t.Helper()
	const key = "apis/admissionregistration.k8s.io/v1"
	core := readDoc(t, "core")
	var facts []discovery.UpstreamFacts
	for _, u := range []struct{ name, address, version, apis string }{
		{"old", "10.0.0.1:6443", "v1.35.4", "v1.35"}, {"new", "10.0.0.2:6443", "v1.36.3", "v1.36"},
	} {
		data := openapitest.Doc(t, u.version, key)
		spec := &discovery.OpenAPISpec{JSON: data, Hash: openapi.Hash(data)}
		apis := readDoc(t, "apis-"+u.apis)
		if u.name == "new" {
			apis = withoutResource(apis, "validatingadmissionpolicies")
		}
		facts = append(facts, discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: u.name, Address: u.address, Ready: true, Version: u.version, Source: discovery.SourceStatic},
			API:      core, APIs: apis,
			OpenAPI:     &discovery.OpenAPIIndex{Keys: map[string]string{key: spec.Hash}, Hash: u.name},
			OpenAPIDocs: map[string]*discovery.OpenAPISpec{key: spec},
		})
	}
	top := discovery.Build("served", time.Unix(0, 0), facts)
	if d := top.DecideOpenAPI(key); d.Action != discovery.ActionServe {
		t.Fatalf("%+v, want served (merged)", d)
	}
	return top
}

// withoutResource returns a copy of d without the resource in any group.
func withoutResource(d *discovery.Document, resource string) *discovery.Document {
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
