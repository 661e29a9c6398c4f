package openapi

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Inputs an aggregated API server behind the apiservers can make skewgate see (aggregated.go):
// each must be refused, and nothing of another key or group-version may change.

// An input that describes a path of another key refuses the merge.
func TestMergeOpenAPIRefusesForeignPaths(t *testing.T) {
	ok := spec(t, `{"openapi":"3.0.0","paths":{"/apis/g/v1/xs":{}},"components":{"schemas":{}}}`)
	for _, p := range []string{"/api/v1/pods", "/apis/g/v10/xs", "/apis/g/v1x", "/apis/g", "/", "/openapi/v3/apis/g/v1", "apis/g/v1/xs"} {
		t.Run(p, func(t *testing.T) {
			hostile := spec(t, `{"openapi":"3.0.0","paths":{"/apis/g/v1/ys":{},`+mustJSON(t, p)+`:{}},"components":{"schemas":{}}}`)
			for _, inputs := range [][]*Spec{{ok, hostile}, {hostile, ok}} {
				if m, err := Merge("apis/g/v1", inputs, time.Unix(1, 0)); !errors.Is(err, errForeignPath) {
					t.Errorf("merged %v, err %v; want %v", m != nil, err, errForeignPath)
				}
			}
		})
	}
	// The key's own root and everything under it are its own, for keys that name no group-version too.
	for key, p := range map[string]string{"apis/g/v1": "/apis/g/v1", "version": "/version/", "apis/g": "/apis/g/"} {
		d := spec(t, `{"openapi":"3.0.0","paths":{`+mustJSON(t, p)+`:{}},"components":{"schemas":{}}}`)
		if _, err := Merge(key, []*Spec{d, d}, time.Unix(1, 0)); err != nil {
			t.Errorf("%s %s: %v", key, p, err)
		}
	}
}

// A losing input keeps or adds only the schema's own kind of the key's group-version, and only if no
// schema of the result claims it already.
func TestMergeOpenAPILosingKindsStayInTheirGroupVersion(t *testing.T) {
	newest := spec(t, `{"openapi":"3.0.0","paths":{"/apis/g/v1/xs":{"get":{"$ref":"#/components/schemas/g.v1.X"}}},"components":{"schemas":{
		"g.v1.X":{"description":"new","x-kubernetes-group-version-kind":[{"group":"g","kind":"X","version":"v1"}]},
		"g.v1.W":{"description":"new W"},
		"io.k8s.api.core.v1.Pod":{"description":"pod as the newest has it","x-kubernetes-group-version-kind":[{"group":"","kind":"Pod","version":"v1"}]}}}}`)
	older := spec(t, `{"openapi":"3.0.0","paths":{"/apis/g/v1/ys":{"get":{"$ref":"#/components/schemas/g.v1.Y"}}},"components":{"schemas":{
		"g.v1.Y":{"description":"only old","x-kubernetes-group-version-kind":[{"group":"g","kind":"Y","version":"v1"}]},
		"evil.Pod":{"description":"another group's kind","x-kubernetes-group-version-kind":[{"group":"","kind":"Pod","version":"v1"}]},
		"evil.X":{"description":"a kind the newest's X claims","x-kubernetes-group-version-kind":[{"group":"g","kind":"X","version":"v1"}]},
		"evil.Z":{"description":"another type's kind","x-kubernetes-group-version-kind":[{"group":"g","kind":"Y","version":"v1"},{"group":"g","kind":"Z","version":"v1"}]},
		"g.v1.W":{"description":"old W","x-kubernetes-group-version-kind":[{"group":"g","kind":"Q","version":"v1"},{"group":"apps","kind":"W","version":"v1"}]},
		"io.k8s.api.core.v1.Pod":{"description":"pod with more kinds","x-kubernetes-group-version-kind":[{"group":"","kind":"Pod","version":"v1"},{"group":"","kind":"Pod","version":"v2"},{"group":"g","kind":"Pod","version":"v1"}]}}}}`)
	m, err := Merge("apis/g/v1", []*Spec{newest, older}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	claims := kindClaims(t, m.JSON)
	want := map[gvk][]string{
		{Group: "g", Version: "v1", Kind: "X"}:  {"g.v1.X"},
		{Group: "g", Version: "v1", Kind: "Y"}:  {"g.v1.Y"},
		{Group: "g", Version: "v1", Kind: "Z"}:  {"evil.Z"},
		{Group: "", Version: "v1", Kind: "Pod"}: {"io.k8s.api.core.v1.Pod"},
		// The one kind the loser may add to the Pod schema: its own type, in the key's group-version.
		{Group: "g", Version: "v1", Kind: "Pod"}: {"io.k8s.api.core.v1.Pod"},
	}
	if !maps.EqualFunc(claims, want, slices.Equal) {
		t.Errorf("kinds claimed %v\nwant %v", claims, want)
	}
	// The losers' schemas are still there (their references resolve), without the kinds they may not claim.
	v := viewDoc(t, m.JSON)
	for _, name := range []string{"evil.Pod", "evil.X", "evil.Z", "g.v1.Y"} {
		if _, ok := v.Components.Schemas[name]; !ok {
			t.Errorf("schema %s dropped", name)
		}
	}
	if !strings.Contains(string(v.Components.Schemas["io.k8s.api.core.v1.Pod"]), "as the newest has it") {
		t.Errorf("newest Pod lost: %s", v.Components.Schemas["io.k8s.api.core.v1.Pod"])
	}

	// A key that names no group-version takes no kind from a losing input.
	nv := spec(t, `{"openapi":"3.0.0","paths":{"/version/":{}},"components":{"schemas":{"a.Info":{"description":"new"}}}}`)
	ov := spec(t, `{"openapi":"3.0.0","paths":{"/version/":{}},"components":{"schemas":{
		"a.Info":{"x-kubernetes-group-version-kind":[{"group":"","kind":"Info","version":""}]},
		"b.Info":{"x-kubernetes-group-version-kind":[{"group":"","kind":"Info","version":""}]}}}}`)
	mv, err := Merge("version", []*Spec{nv, ov}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if c := kindClaims(t, mv.JSON); len(c) != 0 {
		t.Errorf("version: kinds claimed %v, want none", c)
	}
}

// kindClaims maps every kind the document's schemas claim to the schemas claiming it.
func kindClaims(t *testing.T, data []byte) map[gvk][]string {
	t.Helper()
	out := map[gvk][]string{}
	for name, s := range viewDoc(t, data).Components.Schemas {
		var x struct {
			GVKs []gvk `json:"x-kubernetes-group-version-kind"`
		}
		if err := json.Unmarshal(s, &x); err != nil {
			t.Fatal(err)
		}
		for _, k := range x.GVKs {
			out[k] = append(out[k], name)
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAggregatedAPIs(t *testing.T) {
	meta := func(name, managed string) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if managed != "" {
			m.Labels = map[string]string{autoManagedLabel: managed}
		}
		return m
	}
	got := AggregatedAPIs([]*metav1.PartialObjectMetadata{
		meta("v1.", "onstart"), meta("v1.apps", "onstart"), meta("v1.stable.example.com", "true"),
		meta("v1beta1.metrics.k8s.io", ""), meta("v1.evil.example.com", "false"), meta("v1.evil.example.com", ""),
		meta("nodot", ""), meta(".nogroup", ""),
	})
	if want := []string{"evil.example.com/v1", "metrics.k8s.io/v1beta1"}; !slices.Equal(got, want) {
		t.Errorf("aggregated %v, want %v", got, want)
	}
}
