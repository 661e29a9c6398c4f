package discovery

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/openapi"
)

// benchCRDs is how many synthetic CRD group-versions the benchmark cluster has; the first one's
// document is about 200 KB.
const benchCRDs = 4

// benchMergeKeys are the keys the benchmark forces to merge: every upstream's discovery lacks a
// different resource of their group-version, so nobody serves the whole of it. api/v1 is the worst
// case (about 1.5 MB per input).
var benchMergeKeys = []string{keyCore, keyApps, "apis/bench0.example.com/v1"}

// crdDocument is a CRD group-version's OpenAPI document as apiextensions builds it (paths per
// resource with the kind's GVK, one schema per kind referencing ObjectMeta), with kinds resources of
// about size bytes of schema each. It returns the document and its discovery version.
func crdDocument(group string, kinds, size int, variant string) ([]byte, apidiscoveryv2.APIVersionDiscovery) {
	paths := map[string]any{}
	schemas := map[string]any{
		"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": map[string]any{"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have."},
	}
	var rs []apidiscoveryv2.APIResourceDiscovery
	reversed := strings.Split(group, ".")
	slices.Reverse(reversed)
	for k := range kinds {
		kind := fmt.Sprintf("Widget%d", k)
		plural := strings.ToLower(kind) + "s"
		name := strings.Join(reversed, ".") + ".v1." + kind
		g := map[string]string{"group": group, "version": "v1", "kind": kind}
		op := map[string]any{"get": map[string]any{"x-kubernetes-group-version-kind": g, "description": "read the specified " + kind,
			"responses": map[string]any{"200": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": schemaRefPrefix + name}}}}}}}
		base := "/apis/" + group + "/v1/namespaces/{namespace}/" + plural
		paths[base] = op
		paths[base+"/{name}"] = op
		paths[base+"/{name}/status"] = op
		props := map[string]any{"metadata": map[string]any{"$ref": schemaRefPrefix + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}
		for f := 0; f*100 < size; f++ {
			props[fmt.Sprintf("field%04d", f)] = map[string]any{"type": "string", "description": fmt.Sprintf("field %d of %s (%s), a description long enough to weigh about a hundred bytes", f, kind, variant)}
		}
		schemas[name] = map[string]any{"type": "object", "properties": props, "x-kubernetes-group-version-kind": []any{g}}
		rs = append(rs, res(plural, allVerbs, sub("status", "get", "patch", "update")))
	}
	data, err := json.Marshal(map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
		"paths": paths, "components": map[string]any{"schemas": schemas}})
	if err != nil {
		panic(err)
	}
	return data, version("v1", rs...)
}

// benchFacts is the benchmark cluster: the captured v1.35.4 and v1.36.3 apiservers and a third,
// "v1.37.0", derived from v1.36.3 with two resources removed (componentstatuses, controllerrevisions:
// its documents lack their paths, so their hashes differ) and one group-version added; about 300
// resource keys (group-versions without a captured document get synthetic resources) and benchCRDs
// CRD group-versions. With merge, benchMergeKeys need merging and every upstream has their
// documents; without, nothing needs merging.
func benchFacts(b *testing.B, merge bool) []UpstreamFacts {
	b.Helper()
	a := capturedFacts(b, "apiserver-a", v135, true)
	bb := capturedFacts(b, "apiserver-b", v136, true)
	// Copies: the captured indexes are shared by every test.
	a.OpenAPI, bb.OpenAPI = loadCaptured(b, v135).withoutKeys(), loadCaptured(b, v136).withoutKeys()
	c := capturedFacts(b, "apiserver-c", v136, true)
	c.Version = "v1.37.0"
	c = withoutResources(c, "/v1", "componentstatuses")
	c = withoutResources(c, "apps/v1", "controllerrevisions")
	c.OpenAPI = loadCaptured(b, v136).withoutKeys()
	c.OpenAPI.Hash = "v1.37.0"
	cDocs := map[string]*OpenAPISpec{}
	for key, drop := range map[string]string{keyCore: "componentstatuses", keyApps: "controllerrevisions"} {
		d := splitDoc(b, loadCaptured(b, v136).docs[key], []string{drop}, nil, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
		cDocs[key] = d
		c.OpenAPI.Keys[key] = d.Hash
	}
	c.OpenAPI.Keys["apis/newgroup.k8s.io/v1alpha1"] = strings.Repeat("E", 128)
	c.APIs = &Document{Hash: c.APIs.Hash + "+newgroup", Groups: append(slices.Clone(c.APIs.Groups),
		group("newgroup.k8s.io", version("v1alpha1", res("gadgets", allVerbs, sub("status", "get")))))}
	ups := []*UpstreamFacts{&a, &bb, &c}

	// Synthetic resources for the built-in group-versions without a captured document.
	var extra []apidiscoveryv2.APIGroupDiscovery
	for _, key := range slices.Sorted(maps.Keys(bb.OpenAPI.Keys)) {
		gv, ok := openapi.GroupVersion(key)
		if !ok || loadCaptured(b, v136).docs[key] != nil {
			continue
		}
		g, v, _ := strings.Cut(gv, "/")
		var rs []apidiscoveryv2.APIResourceDiscovery
		for r := range 4 {
			rs = append(rs, res(fmt.Sprintf("things%d", r), allVerbs, sub("status", "get", "patch", "update")))
		}
		extra = append(extra, group(g, version(v, rs...)))
	}
	// CRD group-versions: the same document on every upstream, but the third's first one differs.
	for i := range benchCRDs {
		g := fmt.Sprintf("bench%d.example.com", i)
		key := "apis/" + g + "/v1"
		size := 2000
		if i == 0 {
			size = 200_000 / 8
		}
		doc, ver := crdDocument(g, 8, size, "v1")
		extra = append(extra, group(g, ver))
		for j, u := range ups {
			u.OpenAPI.Keys[key] = openapi.Hash(doc)
			spec := &OpenAPISpec{JSON: doc, Hash: openapi.Hash(doc)}
			if i == 0 && j == 2 {
				d, _ := crdDocument(g, 8, size, "v2")
				spec = &OpenAPISpec{JSON: d, Hash: openapi.Hash(d)}
				u.OpenAPI.Keys[key] = spec.Hash
			}
			if i == 0 {
				cDocs[key+"#"+u.Name] = spec
			}
		}
	}
	for _, u := range ups {
		u.APIs = &Document{Hash: u.APIs.Hash + "+bench", Groups: append(slices.Clone(u.APIs.Groups), extra...)}
	}
	if merge {
		// Each upstream lacks a different resource of every merged group-version.
		drops := map[string][3]string{keyCore: {"podtemplates", "limitranges", "componentstatuses"},
			keyApps: {"daemonsets", "replicasets", "controllerrevisions"}, "apis/bench0.example.com/v1": {"widget0s", "widget1s", "widget2s"}}
		for key, d := range drops {
			gv, _ := openapi.GroupVersion(key)
			for j, u := range ups {
				*u = withoutResources(*u, gv, d[j])
				if u.OpenAPIDocs == nil {
					u.OpenAPIDocs = map[string]*OpenAPISpec{}
				}
				switch {
				case strings.HasPrefix(key, "apis/bench0"):
					u.OpenAPIDocs[key] = cDocs[key+"#"+u.Name]
				case j == 2:
					if cd := cDocs[key]; cd != nil {
						u.OpenAPIDocs[key] = cd
					} else {
						u.OpenAPIDocs[key] = loadCaptured(b, v136).docs[key]
					}
				default:
					u.OpenAPIDocs[key] = loadCaptured(b, u.Version).docs[key]
				}
			}
		}
	}
	return []UpstreamFacts{a, bb, c}
}

// BenchmarkBuildOpenAPI measures the Controller's Build (through its merge memo) for a realistic
// skewed cluster (benchFacts): merge-cold, with three keys merged (api/v1 and apps/v1 from three
// documents each, api/v1 the worst case; a CRD's from two) and a new, empty memo for each Build (the
// first Build after the inputs changed); merge-rebuild, the same with the memo kept (a rebuild for a
// change unrelated to OpenAPI); plain,
// the same cluster where every key is routed; no-openapi, the same discovery without any OpenAPI
// index (Build's cost before OpenAPI).
func BenchmarkBuildOpenAPI(b *testing.B) {
	for _, bc := range []struct {
		name         string
		merge, strip bool
		cold         bool
	}{{"merge-cold", true, false, true}, {"merge-rebuild", true, false, false}, {"plain", false, false, false}, {"no-openapi", false, true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			facts := benchFacts(b, bc.merge)
			if bc.strip {
				for i := range facts {
					facts[i].OpenAPI, facts[i].OpenAPIDocs = nil, nil
				}
			}
			memo := openapi.NewMemo(openapi.MemoEntries, openapi.MemoBytes)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			top := build("v", time.Now(), facts, memo)
			runtime.GC()
			runtime.ReadMemStats(&after)
			retained := int64(after.HeapAlloc) - int64(before.HeapAlloc) // the Topology and the memo
			merged, inputs := 0, 0
			for _, k := range benchMergeKeys {
				if m := top.OpenAPIMerged(k); m != nil {
					merged += len(m.JSON)
				}
			}
			for _, f := range facts {
				for _, d := range f.OpenAPIDocs {
					inputs += len(d.JSON)
				}
			}
			if bc.merge && len(top.openapi.merged) != len(benchMergeKeys) {
				b.Fatalf("merged %d keys, want %d (degraded: %v)", len(top.openapi.merged), len(benchMergeKeys), top.OpenAPIDegraded())
			}
			if !bc.merge && len(top.openapi.merged) != 0 {
				b.Fatalf("merged %d keys", len(top.openapi.merged))
			}
			b.ReportAllocs()
			for b.Loop() {
				if bc.cold {
					memo = openapi.NewMemo(openapi.MemoEntries, openapi.MemoBytes)
				}
				build("v", time.Now(), facts, memo)
			}
			// After the loop: b.Loop resets the timer, and with it metrics reported before.
			b.ReportMetric(float64(len(capsOf(facts))), "resource-keys")
			b.ReportMetric(float64(merged), "merged-bytes")
			b.ReportMetric(float64(inputs), "input-bytes")
			if bc.cold {
				// Heap the Topology and the memo hold after one Build from an empty memo (the others
				// measure garbage of the previous sub-benchmark as much as anything).
				b.ReportMetric(float64(retained), "retained-bytes")
			}
			runtime.KeepAlive(top)
		})
	}
}
