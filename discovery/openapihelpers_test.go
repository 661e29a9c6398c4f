package discovery

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/openapi"
)

// schemaRefPrefix starts every reference to a schema of a document.
const schemaRefPrefix = "#/components/schemas/"

// openAPIIndex and openAPIDoc fetch from the fetcher's upstream as the Store does.
func (f *fetcher) openAPIIndex(ctx context.Context, prev *OpenAPIIndex) (*OpenAPIIndex, error) {
	return openapi.FetchIndex(ctx, f.getOpenAPI, prev)
}

func (f *fetcher) openAPIDoc(ctx context.Context, key, hash string, limit int64) (*OpenAPISpec, error) {
	return openapi.FetchDocument(ctx, f.getOpenAPI, key, hash, limit, f.maxBytes, time.Now())
}

// heldDoc returns the document upstream name holds for key.
func heldDoc(c *Controller, name, key string) *OpenAPISpec { return c.openapi.Document(name, key) }

// splitDoc returns a copy of data without the paths containing any of drop and the schemas whose name
// starts with any of dropSchemas, as a document of its own (its own bytes and hash).
func splitDoc(t testing.TB, in *OpenAPISpec, drop, dropSchemas []string, built time.Time) *OpenAPISpec {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(in.JSON, &top); err != nil {
		t.Fatal(err)
	}
	paths := top["paths"].(map[string]any)
	for p := range paths {
		for _, d := range drop {
			if strings.Contains(p, d) {
				delete(paths, p)
			}
		}
	}
	schemas := top["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range schemas {
		for _, d := range dropSchemas {
			if strings.HasPrefix(name, d) {
				delete(schemas, name)
			}
		}
	}
	data, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return &OpenAPISpec{JSON: data, Hash: openapi.Hash(data), Built: built}
}

// gvk is one entry of x-kubernetes-group-version-kind.
type gvk struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

var (
	gvkMAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"}
	gvkVAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}
)

// docView is what a test reads back from a merged document.
type docView struct {
	Paths      map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
	Info json.RawMessage `json:"info"`
}

func viewDoc(t *testing.T, data []byte) docView {
	t.Helper()
	var v docView
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// findKind finds a kind's schema the way kubectl explain's plaintext template does: the GVK of the
// resource's path item (get), then the schema whose x-kubernetes-group-version-kind lists it.
func findKind(t *testing.T, v docView, resourcePath string, want gvk) string {
	t.Helper()
	var item struct {
		Get struct {
			GVK gvk `json:"x-kubernetes-group-version-kind"`
		} `json:"get"`
	}
	raw, ok := v.Paths[resourcePath]
	if !ok {
		t.Errorf("no path %s", resourcePath)
		return ""
	}
	if err := json.Unmarshal(raw, &item); err != nil {
		t.Fatal(err)
	}
	if item.Get.GVK != want {
		t.Errorf("%s: GVK %+v, want %+v", resourcePath, item.Get.GVK, want)
	}
	for _, name := range slices.Sorted(maps.Keys(v.Components.Schemas)) {
		var s struct {
			GVKs []gvk `json:"x-kubernetes-group-version-kind"`
		}
		if err := json.Unmarshal(v.Components.Schemas[name], &s); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(s.GVKs, want) {
			return name
		}
	}
	t.Errorf("no schema for %+v", want)
	return ""
}

// spec is a document of its own bytes and hash.
func spec(t *testing.T, doc string) *OpenAPISpec {
	t.Helper()
	if !json.Valid([]byte(doc)) {
		t.Fatalf("invalid test document %s", doc)
	}
	return &OpenAPISpec{JSON: []byte(doc), Hash: openapi.Hash([]byte(doc))}
}
