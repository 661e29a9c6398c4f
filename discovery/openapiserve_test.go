package discovery

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
)

// skewForMerge is the testbed's skew with a twist: 1.36 does not serve validatingadmissionpolicies,
// so nobody serves the whole admissionregistration.k8s.io/v1 and the front merges.
func skewForMerge(t *testing.T, oldDocs, newDocs bool) []UpstreamFacts {
	var od, nd []string
	if oldDocs {
		od = []string{keyAdmission}
	}
	if newDocs {
		nd = []string{keyAdmission}
	}
	old := capturedFacts(t, "old", v135, true, od...)
	nw := withoutResources(capturedFacts(t, "new", v136, true, nd...), "admissionregistration.k8s.io/v1", "validatingadmissionpolicies")
	return []UpstreamFacts{old, nw}
}

func TestBuildOpenAPIServe(t *testing.T) {
	top := Build("t", time.Unix(100, 0), skewForMerge(t, true, true))
	d := top.DecideOpenAPI(keyAdmission)
	m := top.OpenAPIMerged(keyAdmission)
	if d.Action != ActionServe || m == nil || d.Hash != m.Hash || d.Set == "" {
		t.Fatalf("decision %+v, merged %v", d, m != nil)
	}
	if !strings.Contains(string(top.OpenAPIIndex().JSON), `"`+keyAdmission+`":{"serverRelativeURL":"/openapi/v3/`+keyAdmission+`?hash=`+m.Hash+`"}`) {
		t.Error("the index does not name the merged document")
	}
	if len(top.OpenAPIWants()) != 0 || len(top.OpenAPIDegraded()) != 0 {
		t.Errorf("wants %v degraded %v", top.OpenAPIWants(), top.OpenAPIDegraded())
	}
	v := viewDoc(t, m.JSON)
	findKind(t, v, "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/{name}", gvkMAP)
	findKind(t, v, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}", gvkVAP)
	// What the front will serve as protobuf, and what kube-openapi reads, both accept it.
	if _, err := handler3.ToV3ProtoBinary(m.JSON); err != nil {
		t.Errorf("protobuf: %v", err)
	}
	var sp spec3.OpenAPI
	if err := json.Unmarshal(m.JSON, &sp); err != nil || sp.Paths == nil || len(sp.Paths.Paths) != len(v.Paths) || len(sp.Components.Schemas) != len(v.Components.Schemas) {
		t.Errorf("kube-openapi spec3: %v", err)
	}
	if !bytes.Contains(v.Info, []byte(`"1.36"`)) {
		t.Errorf("info %s, want the newest's", v.Info)
	}
	// Other keys are unaffected.
	if d := top.DecideOpenAPI(keyApps); d.Action != ActionRoute || d.Set != "new" {
		t.Errorf("apps: %+v", d)
	}
	if top.OpenAPIMerged(keyApps) != nil {
		t.Error("apps merged")
	}
}

// One document fetched, the other not: route to the fallback and want only the missing one.
func TestBuildOpenAPIWantsMissing(t *testing.T) {
	top := Build("t", time.Unix(100, 0), skewForMerge(t, true, false))
	if d := top.DecideOpenAPI(keyAdmission); d.Action != ActionRoute || top.OpenAPIMerged(keyAdmission) != nil {
		t.Errorf("decision %+v", d)
	}
	if want := map[string][]string{"new": {keyAdmission}}; !equalWants(top.OpenAPIWants(), want) {
		t.Errorf("wants %v, want %v", top.OpenAPIWants(), want)
	}
	// A document under another hash than the index names is not the one wanted.
	facts := skewForMerge(t, true, true)
	stale := *facts[1].OpenAPIDocs[keyAdmission]
	stale.Hash = strings.Repeat("0", 128)
	facts[1].OpenAPIDocs = map[string]*OpenAPISpec{keyAdmission: &stale}
	top = Build("t", time.Unix(100, 0), facts)
	if want := map[string][]string{"new": {keyAdmission}}; !equalWants(top.OpenAPIWants(), want) {
		t.Errorf("stale document: wants %v, want %v", top.OpenAPIWants(), want)
	}
}

// Inputs that do not merge: route to the fallback, flagged, nothing wanted.
func TestBuildOpenAPIMergeFails(t *testing.T) {
	facts := skewForMerge(t, true, true)
	broken := spec(t, `{"paths":{"/apis/admissionregistration.k8s.io/v1/x":{"$ref":"#/components/schemas/nope"}},"components":{"schemas":{}}}`)
	facts[0].OpenAPI = loadCaptured(t, v135).withoutKeys()
	facts[0].OpenAPI.Keys[keyAdmission] = broken.Hash
	facts[0].OpenAPIDocs = map[string]*OpenAPISpec{keyAdmission: broken}
	top := Build("t", time.Unix(100, 0), facts)
	d := top.DecideOpenAPI(keyAdmission)
	if d.Action != ActionRoute || top.OpenAPIMerged(keyAdmission) != nil {
		t.Errorf("decision %+v", d)
	}
	if r := top.OpenAPIDegraded()[keyAdmission]; !strings.Contains(r, "dangling") {
		t.Errorf("degraded %q", r)
	}
	if len(top.OpenAPIWants()) != 0 {
		t.Errorf("wants %v", top.OpenAPIWants())
	}
}

// The same facts in any order, merged afresh each time, give the same merged bytes.
func TestBuildOpenAPIMergeDeterministic(t *testing.T) {
	facts := skewForMerge(t, true, true)
	facts = append(facts, capturedFacts(t, "new-b", v136, true, keyAdmission))
	facts[2] = withoutResources(facts[2], "admissionregistration.k8s.io/v1", "validatingadmissionpolicies")
	top := Build("t", time.Unix(100, 0), facts)
	first := top.OpenAPIMerged(keyAdmission)
	if first == nil {
		t.Fatal("not merged")
	}
	// The fallback of several upstreams is a set, so xds makes its cluster.
	if d := top.DecideOpenAPI(keyAdmission); d.Set != "new,new-b" || !slices.ContainsFunc(top.Sets, func(s CapabilitySet) bool { return s.ID == d.Set }) {
		t.Errorf("fallback %q, sets %v", d.Set, top.Sets)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		r.Shuffle(len(facts), func(i, j int) { facts[i], facts[j] = facts[j], facts[i] })
		m := Build("t", time.Unix(int64(200+i), 0), facts).OpenAPIMerged(keyAdmission)
		if m == nil || !bytes.Equal(m.JSON, first.JSON) || m.Hash != first.Hash || !m.Built.Equal(first.Built) {
			t.Fatalf("run %d differs", i)
		}
	}
}
