package discovery

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
)

const (
	v135 = "v1.35.4"
	v136 = "v1.36.3"

	keyAdmission = "apis/admissionregistration.k8s.io/v1"
	keyApps      = "apis/apps/v1"
	keyCore      = "api/v1"
	keyCRD       = "apis/stable.example.com/v1"
)

// The captured documents are what the apiservers served under the hashes their indexes name.
func TestCapturedOpenAPIHashes(t *testing.T) {
	for _, v := range []string{v135, v136} {
		c := loadCaptured(t, v)
		if len(c.docs) < 5 {
			t.Fatalf("%s: %d documents captured", v, len(c.docs))
		}
		for key, d := range c.docs {
			if want := c.index.Keys[key]; d.Hash != want {
				t.Errorf("%s %s: SHA-512 %s, index names %s", v, key, d.Hash, want)
			}
		}
	}
}

func TestOpenAPIDecisionsSkew(t *testing.T) {
	old := capturedFacts(t, "old", v135, true)
	nw := capturedFacts(t, "new", v136, true)
	c136, c135 := loadCaptured(t, v136), loadCaptured(t, v135)
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{old, nw})

	// 1.35 lacks mutatingadmissionpolicies: only 1.36 serves the whole group-version.
	if got := top.Decide(ResourceKey{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}, "get"); got != (Decision{Action: ActionRoute, Set: "new"}) {
		t.Fatalf("derived discovery: mutatingadmissionpolicies %+v, want route to new", got)
	}
	want := map[string]OpenAPIDecision{
		keyAdmission: {Action: ActionRoute, Set: "new", Hash: c136.index.Keys[keyAdmission]},
		// Both serve all of apps/v1; the hashes differ, the newest wins.
		keyApps: {Action: ActionRoute, Set: "new", Hash: c136.index.Keys[keyApps]},
		keyCore: {Action: ActionRoute, Set: "new", Hash: c136.index.Keys[keyCore]},
		// Non-group-version keys have no resources: every upstream listing them qualifies.
		"version": {Action: ActionRoute, Set: "new", Hash: c136.index.Keys["version"]},
	}
	for key, w := range want {
		if got := top.DecideOpenAPI(key); got != w {
			t.Errorf("%s: %+v, want %+v", key, got, w)
		}
	}
	if c135.index.Keys[keyAdmission] == c136.index.Keys[keyAdmission] {
		t.Fatal("captured hashes equal: the test proves nothing")
	}
	// Every key routes to the 1.36 upstream, so the front's index is, byte for byte, the index the
	// 1.36 apiserver served (json.Marshal of the same type, same keys, same URLs).
	idx := top.OpenAPIIndex()
	if idx == nil {
		t.Fatal("no index")
	}
	if !bytes.Equal(idx.JSON, c136.indexRaw) {
		t.Errorf("index differs from the 1.36 apiserver's:\n%.300s\n%.300s", idx.JSON, c136.indexRaw)
	}
	sum := sha512.Sum512(idx.JSON)
	if idx.Hash != strings.ToUpper(hex.EncodeToString(sum[:])) {
		t.Errorf("index hash %s is not the SHA-512 of its bytes", idx.Hash)
	}
	if !idx.Built.Equal(time.Unix(100, 0)) {
		t.Errorf("index built %v", idx.Built)
	}
	if len(top.OpenAPIWants()) != 0 || len(top.OpenAPIDegraded()) != 0 {
		t.Errorf("wants %v degraded %v", top.OpenAPIWants(), top.OpenAPIDegraded())
	}
	if n := len(top.OpenAPIDecisions()); n != len(c136.index.Keys) {
		t.Errorf("%d non-default decisions, want %d", n, len(c136.index.Keys))
	}
}

// The index names every key by its decision's hash and parses back as kube-openapi's type.
func TestOpenAPIIndexShape(t *testing.T) {
	old := capturedFacts(t, "old", v135, true)
	// 1.36 lists no apps/v1: the key routes to 1.35, and the index names 1.35's hash.
	nw := capturedFacts(t, "new", v136, true)
	nw.OpenAPI = loadCaptured(t, v136).withoutKeys(keyApps)
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{old, nw})
	c135 := loadCaptured(t, v135)
	if got, want := top.DecideOpenAPI(keyApps), (OpenAPIDecision{Action: ActionRoute, Set: "old", Hash: c135.index.Keys[keyApps]}); got != want {
		t.Errorf("apps/v1 only on 1.35: %+v, want %+v", got, want)
	}
	var idx handler3.OpenAPIV3Discovery
	dec := json.NewDecoder(bytes.NewReader(top.OpenAPIIndex().JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Paths) != len(c135.index.Keys) {
		t.Errorf("index has %d keys, want %d", len(idx.Paths), len(c135.index.Keys))
	}
	for key, gv := range idx.Paths {
		if want := "/openapi/v3/" + key + "?hash=" + top.DecideOpenAPI(key).Hash; gv.ServerRelativeURL != want {
			t.Errorf("%s: %s, want %s", key, gv.ServerRelativeURL, want)
		}
	}
	if !strings.Contains(string(top.OpenAPIIndex().JSON), `"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=`+c135.index.Keys[keyApps]+`"}`) {
		t.Error("index does not name 1.35's apps/v1 document")
	}
}

func TestOpenAPIDecisionsSets(t *testing.T) {
	c136 := loadCaptured(t, v136)
	for _, tc := range []struct {
		name  string
		facts []UpstreamFacts
		want  OpenAPIDecision
		sets  []SetID
	}{
		{"two 1.36 of one hash", []UpstreamFacts{capturedFacts(t, "old", v135, true), capturedFacts(t, "new-a", v136, true), capturedFacts(t, "new-b", v136, true)},
			OpenAPIDecision{Action: ActionRoute, Set: "new-a,new-b", Hash: c136.index.Keys[keyAdmission]}, []SetID{"new-a,new-b"}},
		// The only complete one is not ready (starting): the ready 1.35 serves the group-version's
		// document rather than a 503 for all of it, until the merge is built.
		{"capable one not ready", []UpstreamFacts{capturedFacts(t, "old", v135, true), capturedFacts(t, "new", v136, false)},
			OpenAPIDecision{Action: ActionRoute, Set: "old", Hash: loadCaptured(t, v135).index.Keys[keyAdmission]}, nil},
		{"nobody ready", []UpstreamFacts{capturedFacts(t, "old", v135, false), capturedFacts(t, "new", v136, false)},
			OpenAPIDecision{Action: ActionUnavailable, Hash: c136.index.Keys[keyAdmission]}, nil},
		// apps/v1 is served whole by both: the not-ready 1.36 loses to the ready 1.35.
		{"not ready newest, apps", []UpstreamFacts{capturedFacts(t, "old", v135, true), capturedFacts(t, "new", v136, false)},
			OpenAPIDecision{Action: ActionRoute, Set: "old", Hash: loadCaptured(t, v135).index.Keys[keyApps]}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := Build("t", time.Unix(100, 0), tc.facts)
			key := keyAdmission
			if strings.HasSuffix(tc.name, "apps") {
				key = keyApps
			}
			if got := top.DecideOpenAPI(key); got != tc.want {
				t.Errorf("%s: %+v, want %+v", key, got, tc.want)
			}
			var ids []SetID
			for _, s := range top.Sets {
				ids = append(ids, s.ID)
			}
			if !slices.Equal(ids, tc.sets) {
				t.Errorf("sets %v, want %v", ids, tc.sets)
			}
		})
	}
}

// TestOpenAPINotReadyNewestMerges: with the only apiserver serving all of admissionregistration.k8s.io/v1
// not ready, its document is wanted and, once held, merged with the ready one's: kubectl explain of
// every resource of the group-version works, the new one's too.
func TestOpenAPINotReadyNewestMerges(t *testing.T) {
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{capturedFacts(t, "old", v135, true), capturedFacts(t, "new", v136, false)})
	if w := top.OpenAPIWants(); !slices.Contains(w["new"], keyAdmission) || !slices.Contains(w["old"], keyAdmission) {
		t.Errorf("wants %v, want %s from both", w, keyAdmission)
	}
	top = Build("t", time.Unix(100, 0), []UpstreamFacts{capturedFacts(t, "old", v135, true, keyAdmission), capturedFacts(t, "new", v136, false, keyAdmission)})
	d := top.DecideOpenAPI(keyAdmission)
	m := top.OpenAPIMerged(keyAdmission)
	if d.Action != ActionServe || d.Set != "old" || m == nil || d.Hash != m.Hash {
		t.Fatalf("%+v, want served (merged), failing open to old", d)
	}
	for _, p := range []string{"/mutatingadmissionpolicies", "/validatingadmissionpolicies"} {
		if !strings.Contains(string(m.JSON), p) {
			t.Errorf("merged document lacks %s", p)
		}
	}
}

func TestOpenAPIIdenticalIndexesPassThrough(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts []UpstreamFacts
	}{
		{"one version", []UpstreamFacts{capturedFacts(t, "a", v136, true), capturedFacts(t, "b", v136, false)}},
		{"no index", []UpstreamFacts{upstream("a", true, true), upstream("b", true, false)}},
		{"one upstream", []UpstreamFacts{capturedFacts(t, "a", v135, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := Build("t", time.Unix(100, 0), tc.facts)
			if top.OpenAPIIndex() != nil {
				t.Error("index built; want pass-through")
			}
			if ds := top.OpenAPIDecisions(); len(ds) != 0 {
				t.Errorf("decisions %+v", ds)
			}
			if tc.facts[0].OpenAPI != nil {
				if d := top.DecideOpenAPI(keyAdmission); d.Action != ActionDefault || d.Hash != tc.facts[0].OpenAPI.Keys[keyAdmission] {
					t.Errorf("admission: %+v", d)
				}
			}
		})
	}
}

// An upstream whose index is not known yet lists nothing: the others' documents are routed to.
func TestOpenAPIIndexMissing(t *testing.T) {
	a := capturedFacts(t, "a", v136, true)
	b := capturedFacts(t, "b", v136, true)
	b.OpenAPI = nil
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{a, b})
	if d := top.DecideOpenAPI(keyApps); d != (OpenAPIDecision{Action: ActionRoute, Set: "a", Hash: a.OpenAPI.Keys[keyApps]}) {
		t.Errorf("apps: %+v", d)
	}
	if top.OpenAPIIndex() == nil {
		t.Error("no index")
	}
}

// Nobody serves the whole group-version: until the documents are fetched, the key routes to the
// fallback (the group serving the most of its resources) and every upstream listing it is asked.
func TestOpenAPINeedsMerge(t *testing.T) {
	old := capturedFacts(t, "old", v135, true)
	// new lacks validatingadmissionpolicies (and its status), old lacks the mutating ones.
	nw := withoutResources(capturedFacts(t, "new", v136, true), "admissionregistration.k8s.io/v1", "validatingadmissionpolicies")
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{old, nw})
	d := top.DecideOpenAPI(keyAdmission)
	// The fallback serves the most resource keys of the group-version, the newest on a tie.
	cov := coverageByGV(capsOf([]UpstreamFacts{nw, old}), 2)["admissionregistration.k8s.io/v1"]
	wantSet, wantHash := SetID("new"), nw.OpenAPI.Keys[keyAdmission]
	if cov.Count[1] > cov.Count[0] {
		wantSet, wantHash = "old", old.OpenAPI.Keys[keyAdmission]
	}
	if cov.All.Has(0) || cov.All.Has(1) {
		t.Fatalf("coverage %v: somebody serves the whole group-version", cov.All)
	}
	if want := (OpenAPIDecision{Action: ActionRoute, Set: wantSet, Hash: wantHash}); d != want {
		t.Errorf("admission: %+v, want degraded %+v (counts new %d, old %d)", d, want, cov.Count[0], cov.Count[1])
	}
	if want := map[string][]string{"new": {keyAdmission}, "old": {keyAdmission}}; !equalWants(top.OpenAPIWants(), want) {
		t.Errorf("wants %v, want %v", top.OpenAPIWants(), want)
	}
	if top.OpenAPIDegraded()[keyAdmission] == "" {
		t.Error("not flagged degraded")
	}
}

func equalWants(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// capsOf is the merged discovery's resource keys of facts (in the given order).
func capsOf(facts []UpstreamFacts) map[ResourceKey]*capability {
	caps := map[ResourceKey]*capability{}
	for i, f := range facts {
		for _, d := range []*Document{f.API, f.APIs} {
			if d != nil {
				one := newBitset(len(facts))
				one.set(i)
				addCapabilities(caps, d.Groups, one)
			}
		}
	}
	return caps
}

// A change of the OpenAPI view alone (an index's hash for one key) publishes a new Topology.
func TestOpenAPIFingerprint(t *testing.T) {
	old := capturedFacts(t, "old", v135, true)
	nw := capturedFacts(t, "new", v136, true)
	before := fingerprint(Build("t", time.Unix(100, 0), []UpstreamFacts{old, nw}))
	changed := loadCaptured(t, v136).withoutKeys()
	changed.Keys[keyCRD] = strings.Repeat("A", 128)
	nw.OpenAPI = changed
	if after := fingerprint(Build("t", time.Unix(200, 0), []UpstreamFacts{old, nw})); after == before {
		t.Error("a CRD's new hash leaves the fingerprint unchanged")
	}
	nw = capturedFacts(t, "new", v136, true)
	if again := fingerprint(Build("t", time.Unix(300, 0), []UpstreamFacts{nw, old})); again != before {
		t.Error("fingerprint depends on the time or the order of facts")
	}
}

// Nobody listing the key serves its whole group-version, but they all publish one document: a merge
// would add nothing, so the key routes to them under their own hash, and nothing is fetched.
func TestOpenAPIOneDocumentNoMerge(t *testing.T) {
	old := capturedFacts(t, "old", v135, true, keyAdmission)
	nw := capturedFacts(t, "new", v136, true, keyAdmission)
	nw.OpenAPI = nil // index not fetched yet; its discovery has mutatingadmissionpolicies
	top := Build("t", time.Unix(100, 0), []UpstreamFacts{old, nw})
	if d, want := top.DecideOpenAPI(keyAdmission), (OpenAPIDecision{Action: ActionRoute, Set: "old", Hash: old.OpenAPI.Keys[keyAdmission]}); d != want {
		t.Errorf("admission: %+v, want %+v", d, want)
	}
	if top.OpenAPIMerged(keyAdmission) != nil || len(top.OpenAPIWants()) != 0 || len(top.OpenAPIDegraded()) != 0 {
		t.Errorf("merged %v wants %v degraded %v", top.OpenAPIMerged(keyAdmission) != nil, top.OpenAPIWants(), top.OpenAPIDegraded())
	}
}
