package openapitest

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// GVK is one entry of x-kubernetes-group-version-kind.
type GVK struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// DocView is what a test reads back from an OpenAPI v3 document.
type DocView struct {
	Paths      map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
	Info json.RawMessage `json:"info"`
}

// ViewDoc reads data as a DocView.
func ViewDoc(t testing.TB, data []byte) DocView {
	t.Helper()
	var v DocView
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// FindKind finds a kind's schema the way kubectl explain's plaintext template does: the GVK of the
// resource's path item (get), then the schema whose x-kubernetes-group-version-kind lists it.
func FindKind(t testing.TB, v DocView, resourcePath string, want GVK) string {
	t.Helper()
	var item struct {
		Get struct {
			GVK GVK `json:"x-kubernetes-group-version-kind"`
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
			GVKs []GVK `json:"x-kubernetes-group-version-kind"`
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

// SplitDoc returns a copy of the document data without the paths containing any of drop and the
// schemas whose name starts with any of dropSchemas.
func SplitDoc(t testing.TB, data []byte, drop, dropSchemas []string) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
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
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
