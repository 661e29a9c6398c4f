package openapi

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/openapitest"
)

// The shared readers of OpenAPI documents (internal/openapitest).
type docView = openapitest.DocView

var viewDoc = openapitest.ViewDoc

func findKind(t testing.TB, v docView, resourcePath string, want gvk) string {
	t.Helper()
	return openapitest.FindKind(t, v, resourcePath, openapitest.GVK(want))
}

// splitDoc returns a copy of data without the paths containing any of drop and the schemas whose name
// starts with any of dropSchemas, as a document of its own (its own bytes and hash).
func splitDoc(t testing.TB, in *Spec, drop, dropSchemas []string, built time.Time) *Spec {
	t.Helper()
	data := openapitest.SplitDoc(t, in.JSON, drop, dropSchemas)
	return &Spec{JSON: data, Hash: Hash(data), Built: built}
}

const admPrefix = "io.k8s.api.admissionregistration.v1."

var (
	gvkMAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"}
	gvkVAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}
)

// Two inputs, each lacking one resource's paths and schemas: the merge has both, findable by GVK, and
// every path and schema of the original.
func TestMergeOpenAPISplit(t *testing.T) {
	full := loadCaptured(t, v136).docs[keyAdmission]
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	noMAP := splitDoc(t, full, []string{"mutatingadmissionpolicies"}, []string{admPrefix + "MutatingAdmissionPolic"}, t0)
	noVAP := splitDoc(t, full, []string{"validatingadmissionpolicies"}, []string{admPrefix + "ValidatingAdmissionPolic"}, t0.Add(time.Minute))
	for _, in := range []*Spec{noMAP, noVAP} {
		if findKindQuiet(in.JSON, gvkMAP) && findKindQuiet(in.JSON, gvkVAP) {
			t.Fatal("split input still has both kinds")
		}
	}
	m, err := Merge(keyAdmission, []*Spec{noMAP, noVAP}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	v := viewDoc(t, m.JSON)
	if name := findKind(t, v, "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/{name}", gvkMAP); name != admPrefix+"MutatingAdmissionPolicy" {
		t.Errorf("MutatingAdmissionPolicy schema %q", name)
	}
	if name := findKind(t, v, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}", gvkVAP); name != admPrefix+"ValidatingAdmissionPolicy" {
		t.Errorf("ValidatingAdmissionPolicy schema %q", name)
	}
	orig := viewDoc(t, full.JSON)
	if !slices.Equal(slices.Sorted(maps.Keys(v.Paths)), slices.Sorted(maps.Keys(orig.Paths))) {
		t.Errorf("paths %d, original %d", len(v.Paths), len(orig.Paths))
	}
	if !slices.Equal(slices.Sorted(maps.Keys(v.Components.Schemas)), slices.Sorted(maps.Keys(orig.Components.Schemas))) {
		t.Errorf("schemas %d, original %d", len(v.Components.Schemas), len(orig.Components.Schemas))
	}
	for p, item := range orig.Paths {
		if !jsonEqual(t, item, v.Paths[p]) {
			t.Errorf("path %s changed", p)
		}
	}
	for name, s := range orig.Components.Schemas {
		if !jsonEqual(t, s, v.Components.Schemas[name]) {
			t.Errorf("schema %s changed", name)
		}
	}
	sum := sha512.Sum512(m.JSON)
	if m.Hash != strings.ToUpper(hex.EncodeToString(sum[:])) {
		t.Error("hash is not the SHA-512 of the bytes")
	}
	if !m.Built.Equal(t0.Add(time.Minute)) {
		t.Errorf("built %v, want the latest input's", m.Built)
	}
	if bytes.Contains(m.JSON, []byte("\n")) || !json.Valid(m.JSON) {
		t.Error("output not compact JSON")
	}
}

func findKindQuiet(data []byte, want gvk) bool {
	var v docView
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	for _, s := range v.Components.Schemas {
		var x struct {
			GVKs []gvk `json:"x-kubernetes-group-version-kind"`
		}
		if json.Unmarshal(s, &x) == nil && slices.Contains(x.GVKs, want) {
			return true
		}
	}
	return false
}

// jsonEqual compares two JSON values (the split inputs were re-marshalled: their key order differs).
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func spec(t *testing.T, doc string) *Spec {
	t.Helper()
	if !json.Valid([]byte(doc)) {
		t.Fatalf("invalid test document %s", doc)
	}
	return &Spec{JSON: []byte(doc), Hash: Hash([]byte(doc))}
}

// On a name clash the newest input's schema wins; of the loser's kinds, only the schema's own kind
// of this group-version is added (not another type's kind, not another group-version's).
func TestMergeOpenAPIClash(t *testing.T) {
	newest := spec(t, `{"openapi":"3.0.0","info":{"version":"new"},"paths":{"/apis/g/v1/xs":{"get":{"description":"new"}}},
		"components":{"schemas":{
		"g.v1.X":{"description":"new X","x-kubernetes-group-version-kind":[{"group":"g","kind":"X","version":"v1beta1"}]},
		"g.v1.Same":{"type":"string"}}}}`)
	older := spec(t, `{"openapi":"3.0.0","info":{"version":"old"},"paths":{"/apis/g/v1/xs":{"get":{"description":"old"}},"/apis/g/v1/ys":{"get":{"$ref":"#/components/schemas/g.v1.Y"}}},
		"components":{"schemas":{
		"g.v1.X":{"description":"old X","x-kubernetes-group-version-kind":[{"group":"g","kind":"X","version":"v1"},{"group":"g","kind":"X2","version":"v1"},{"group":"other","kind":"Z","version":"v1"}]},
		"g.v1.Same":{"type":"string"},
		"g.v1.Y":{"description":"only old"}}}}`)
	m, err := Merge("apis/g/v1", []*Spec{newest, older}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"components":{"schemas":{` +
		`"g.v1.Same":{"type":"string"},` +
		`"g.v1.X":{"description":"new X","x-kubernetes-group-version-kind":[{"group":"g","kind":"X","version":"v1beta1"},{"group":"g","kind":"X","version":"v1"}]},` +
		`"g.v1.Y":{"description":"only old"}}},` +
		`"info":{"version":"new"},"openapi":"3.0.0",` +
		`"paths":{"/apis/g/v1/xs":{"get":{"description":"new"}},"/apis/g/v1/ys":{"get":{"$ref":"#/components/schemas/g.v1.Y"}}}}`
	if string(m.JSON) != want {
		t.Errorf("merged\n%s\nwant\n%s", m.JSON, want)
	}
	if !m.Built.Equal(time.Unix(1, 0)) {
		t.Errorf("built %v: inputs without a time take now", m.Built)
	}
	// The same clash the other way round: the other document is newest now.
	m2, err := Merge("apis/g/v1", []*Spec{older, newest}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m2.JSON, []byte(`"description":"old X"`)) || bytes.Contains(m2.JSON, []byte(`"description":"new X"`)) {
		t.Errorf("older first: %s", m2.JSON)
	}
}

func TestMergeOpenAPIRejects(t *testing.T) {
	ok := spec(t, `{"openapi":"3.0.0","paths":{},"components":{"schemas":{"a":{}}}}`)
	for _, tc := range []struct {
		name, doc, err string
	}{
		{"dangling ref", `{"paths":{"/apis/g/v1/p":{"get":{"schema":{"$ref":"#/components/schemas/missing"}}}},"components":{"schemas":{"b":{}}}}`, `dangling reference to schema "missing"`},
		{"dangling ref in a schema", `{"paths":{},"components":{"schemas":{"b":{"allOf":[{"$ref":"#/components/schemas/c~1d"}]}}}}`, `dangling reference to schema "c/d"`},
		{"paths not an object", `{"paths":[],"components":{"schemas":{}}}`, "paths: not a JSON object"},
		{"schemas not an object", `{"paths":{},"components":{"schemas":"x"}}`, "components.schemas: not a JSON object"},
		{"not an object", `[1]`, "not a JSON object"},
		{"bad GVK list on clash", `{"paths":{},"components":{"schemas":{"a":{"x-kubernetes-group-version-kind":"x"}}}}`, `schema "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge("apis/g/v1", []*Spec{ok, spec(t, tc.doc)}, time.Unix(1, 0))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
	// A reference escaped inside a description is no reference.
	if _, err := Merge("apis/g/v1", []*Spec{spec(t, `{"paths":{},"components":{"schemas":{"a":{"description":"see \"#/components/schemas/nothing\""}}}}`)}, time.Unix(1, 0)); err != nil {
		t.Errorf("escaped quote: %v", err)
	}
}

// The captured documents of both releases merge (newest first) into a document with every path of
// both and, for every kind either describes in the key's group-version, a schema listing it.
func TestMergeOpenAPICapturedReleases(t *testing.T) {
	for _, key := range []string{keyCore, keyApps, keyAdmission, keyCRD} {
		t.Run(key, func(t *testing.T) {
			nw, old := loadCaptured(t, v136).docs[key], loadCaptured(t, v135).docs[key]
			m, err := Merge(key, []*Spec{nw, old}, time.Unix(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			v := viewDoc(t, m.JSON)
			gv, _ := GroupVersion(key)
			g, ver, _ := strings.Cut(gv, "/")
			kinds := 0
			for _, in := range []*Spec{nw, old} {
				iv := viewDoc(t, in.JSON)
				for p := range iv.Paths {
					if _, ok := v.Paths[p]; !ok {
						t.Errorf("path %s lost", p)
					}
				}
				for name, s := range iv.Components.Schemas {
					var x struct {
						GVKs []gvk `json:"x-kubernetes-group-version-kind"`
					}
					if err := json.Unmarshal(s, &x); err != nil {
						t.Fatal(err)
					}
					for _, k := range x.GVKs {
						if k.Group == g && k.Version == ver {
							kinds++
							if !findKindQuiet(m.JSON, k) {
								t.Errorf("kind %+v of %s lost", k, name)
							}
						}
					}
				}
			}
			if kinds == 0 {
				t.Fatal("no kinds checked")
			}
		})
	}
}
