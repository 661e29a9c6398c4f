package discovery

import (
	"encoding/json"
	"github.com/skewgate/skewgate/internal/openapitest"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/kube-openapi/pkg/handler3"

	"github.com/skewgate/skewgate/openapi"
)

// capturedOpenAPI is what one testbed apiserver served (testdata/openapi/<version>/).
type capturedOpenAPI struct {
	version  string
	indexRaw []byte
	index    *OpenAPIIndex
	docs     map[string]*OpenAPISpec // key -> document
}

var capturedCache = map[string]*capturedOpenAPI{}

// loadCaptured reads the captured index and documents of version ("v1.35.4", "v1.36.3"). The
// documents' Built is a fixed time per version.
func loadCaptured(t testing.TB, version string) *capturedOpenAPI {
	t.Helper()
	if c := capturedCache[version]; c != nil {
		return c
	}
	dir := openapitest.Dir(t, version)
	c := &capturedOpenAPI{version: version, indexRaw: openapitest.Gunzip(t, filepath.Join(dir, "index.json.gz")), docs: map[string]*OpenAPISpec{}}
	var idx handler3.OpenAPIV3Discovery
	if err := json.Unmarshal(c.indexRaw, &idx); err != nil {
		t.Fatal(err)
	}
	c.index = &OpenAPIIndex{Keys: map[string]string{}, Hash: version}
	for key, gv := range idx.Paths {
		u, err := url.Parse(gv.ServerRelativeURL)
		if err != nil {
			t.Fatal(err)
		}
		c.index.Keys[key] = u.Query().Get("hash")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	built := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if version == "v1.36.3" {
		built = built.Add(time.Hour)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json.gz")
		if name == "index" {
			continue
		}
		key := strings.ReplaceAll(name, "_", "/")
		data := openapitest.Gunzip(t, f)
		c.docs[key] = &OpenAPISpec{JSON: data, Hash: openapi.Hash(data), Built: built}
	}
	capturedCache[version] = c
	return c
}

// withoutKeys returns a copy of the index without keys (a copy to change: the captured index is shared).
func (c *capturedOpenAPI) withoutKeys(keys ...string) *OpenAPIIndex {
	out := &OpenAPIIndex{Keys: maps.Clone(c.index.Keys), Hash: c.index.Hash + "-" + strings.Join(keys, ",")}
	for _, k := range keys {
		delete(out.Keys, k)
	}
	return out
}

// capturedFacts is an upstream with the captured index of version (shared: never change it, replace
// it with a copy from withoutKeys), the documents of the keys in
// docs, and discovery documents derived from the captured OpenAPI documents' paths (every resource
// and subresource they name, with every verb).
func capturedFacts(t testing.TB, name, version string, ready bool, docs ...string) UpstreamFacts {
	t.Helper()
	c := loadCaptured(t, version)
	f := UpstreamFacts{Upstream: Upstream{Name: name, Address: name + ":6443", Version: version, Ready: ready}, OpenAPI: c.index}
	f.API, f.APIs = discoveryFromOpenAPI(t, c)
	for _, k := range docs {
		if f.OpenAPIDocs == nil {
			f.OpenAPIDocs = map[string]*OpenAPISpec{}
		}
		f.OpenAPIDocs[k] = c.docs[k]
	}
	return f
}

// discoveryFromOpenAPI derives /api and /apis from the paths of the captured group-version documents.
func discoveryFromOpenAPI(t testing.TB, c *capturedOpenAPI) (api, apis *Document) {
	t.Helper()
	api, apis = &Document{Hash: "api-" + c.version}, &Document{Hash: "apis-" + c.version}
	for _, key := range slices.Sorted(maps.Keys(c.docs)) {
		gv, ok := openapi.GroupVersion(key)
		if !ok {
			continue
		}
		g, v, _ := strings.Cut(gv, "/")
		var doc struct {
			Paths map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(c.docs[key].JSON, &doc); err != nil {
			t.Fatal(err)
		}
		subs := map[string]map[string]bool{}
		for p := range doc.Paths {
			rest, ok := strings.CutPrefix(p, "/"+key+"/")
			if !ok {
				continue
			}
			segs := strings.Split(rest, "/")
			if segs[0] == "watch" {
				continue
			}
			if len(segs) > 2 && segs[0] == "namespaces" && segs[1] == "{namespace}" {
				segs = segs[2:]
			}
			if subs[segs[0]] == nil {
				subs[segs[0]] = map[string]bool{}
			}
			if len(segs) >= 3 && segs[1] == "{name}" {
				subs[segs[0]][segs[2]] = true
			}
		}
		var rs []apidiscoveryv2.APIResourceDiscovery
		for _, r := range slices.Sorted(maps.Keys(subs)) {
			var ss []apidiscoveryv2.APISubresourceDiscovery
			for _, s := range slices.Sorted(maps.Keys(subs[r])) {
				ss = append(ss, sub(s, "get"))
			}
			rs = append(rs, res(r, allVerbs, ss...))
		}
		target := apis
		if g == "" {
			target = api
		}
		target.Groups = append(target.Groups, group(g, version(v, rs...)))
	}
	return api, apis
}

// withoutResources returns a copy of f whose discovery lacks the resources (resource names) of the
// group-version gv ("group/version", "/v1" for the core group).
func withoutResources(f UpstreamFacts, gv string, resources ...string) UpstreamFacts {
	g, v, _ := strings.Cut(gv, "/")
	strip := func(d *Document) *Document {
		out := &Document{Hash: d.Hash + "-" + gv + "-" + strings.Join(resources, ","), Groups: slices.Clone(d.Groups)}
		for gi := range out.Groups {
			if out.Groups[gi].Name != g {
				continue
			}
			out.Groups[gi].Versions = slices.Clone(out.Groups[gi].Versions)
			for vi := range out.Groups[gi].Versions {
				ver := &out.Groups[gi].Versions[vi]
				if ver.Version != v {
					continue
				}
				ver.Resources = slices.DeleteFunc(slices.Clone(ver.Resources), func(r apidiscoveryv2.APIResourceDiscovery) bool {
					return slices.Contains(resources, r.Resource)
				})
			}
		}
		return out
	}
	f.API, f.APIs = strip(f.API), strip(f.APIs)
	return f
}
