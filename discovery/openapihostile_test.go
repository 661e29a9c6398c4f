package discovery

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// A key that needs a merge is only routed when a hash is not a SHA-512 or an aggregated APIService
// serves it: nothing is fetched, nothing merged, and the index names the hash the routed-to
// apiservers publish. The same facts without the hostile part merge (the test can fail).
func TestBuildOpenAPIRouteOnly(t *testing.T) {
	base := Build("t", time.Unix(100, 0), skewForMerge(t, true, true))
	if d := base.DecideOpenAPI(keyAdmission); d.Action != ActionServe {
		t.Fatalf("without hostile input: %+v, want a merge", d)
	}
	for _, tc := range []struct {
		name, why string
		hostile   func([]UpstreamFacts)
	}{
		{"hash not SHA-512", "not a SHA-512", func(facts []UpstreamFacts) {
			// The old apiserver's index names the key by a hash of the aggregated server's choosing; the
			// document held under it (as a fetch that trusted it would have held it) is not used.
			facts[0].OpenAPI = loadCaptured(t, v135).withoutKeys()
			facts[0].OpenAPI.Keys[keyAdmission] = "evil1"
			facts[0].OpenAPIDocs = map[string]*OpenAPISpec{keyAdmission: {JSON: loadCaptured(t, v135).docs[keyAdmission].JSON, Hash: "evil1"}}
		}},
		{"lower-case SHA-512", "not a SHA-512", func(facts []UpstreamFacts) {
			h := strings.ToLower(loadCaptured(t, v135).index.Keys[keyAdmission])
			facts[0].OpenAPI = loadCaptured(t, v135).withoutKeys()
			facts[0].OpenAPI.Keys[keyAdmission] = h
			facts[0].OpenAPIDocs = map[string]*OpenAPISpec{keyAdmission: {JSON: loadCaptured(t, v135).docs[keyAdmission].JSON, Hash: h}}
		}},
		{"aggregated APIService on one upstream", "aggregated APIService", func(facts []UpstreamFacts) {
			facts[1].AggregatedAPIs = []string{"admissionregistration.k8s.io/v1"}
		}},
		{"APIServices not known yet", "not known yet", func(facts []UpstreamFacts) {
			for i := range facts {
				facts[i].AggregatedAPIs = []string{allAggregated}
			}
		}},
		{"aggregated APIService on every upstream", "aggregated APIService", func(facts []UpstreamFacts) {
			for i := range facts {
				facts[i].AggregatedAPIs = []string{"admissionregistration.k8s.io/v1", "metrics.k8s.io/v1beta1"}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			facts := skewForMerge(t, true, true)
			tc.hostile(facts)
			top := Build("t", time.Unix(100, 0), facts)
			d := top.DecideOpenAPI(keyAdmission)
			if d.Action != ActionRoute || top.OpenAPIMerged(keyAdmission) != nil {
				t.Fatalf("decision %+v, merged %v; want a route", d, top.OpenAPIMerged(keyAdmission) != nil)
			}
			for _, name := range d.Set.Members() {
				f := facts[slices.IndexFunc(facts, func(f UpstreamFacts) bool { return f.Name == name })]
				if f.OpenAPI.Keys[keyAdmission] != d.Hash {
					t.Errorf("index names %.20s… for the key, %s publishes %.20s…", d.Hash, name, f.OpenAPI.Keys[keyAdmission])
				}
			}
			if len(top.OpenAPIWants()) != 0 {
				t.Errorf("wants %v", top.OpenAPIWants())
			}
			if r := top.OpenAPIRoutedOnly()[keyAdmission]; !strings.Contains(r, tc.why) {
				t.Errorf("routed only %q, want %q", r, tc.why)
			}
			if len(top.OpenAPIDegraded()) != 0 {
				t.Errorf("degraded %v: its documents would be kept", top.OpenAPIDegraded())
			}
			// Nothing of another key changed.
			for _, k := range []string{keyCore, keyApps, keyCRD} {
				if got, want := top.DecideOpenAPI(k), base.DecideOpenAPI(k); got != want {
					t.Errorf("%s: %+v, without hostile input %+v", k, got, want)
				}
			}
		})
	}
}

// A hash that is not a SHA-512 is never fetched; bytes that are not their hash are refused.
func TestFetchOpenAPIRefusesUnverifiable(t *testing.T) {
	pki, cert := testPKI(t)
	docs := capturedDocs(t, "v1.36.3", "apis/apps/v1")
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), docs)
	f, err := newFetcher(restFor(t, pki), up.addr(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	real := sha512Hex(docs["apis/apps/v1"])
	for _, h := range []string{"evil", strings.ToLower(real), real[:127], strings.Repeat("G", 128)} {
		if _, err := f.openAPIDoc(ctx, "apis/apps/v1", h, 8<<20); errorType(err) != ErrIntegrity {
			t.Errorf("hash %.20q: err %v, want %s", h, err, ErrIntegrity)
		}
	}
	if n := up.requestsFor("apis/apps/v1"); n != 0 {
		t.Errorf("%d requests for unverifiable hashes, want none", n)
	}
	// Another document under the hash of this one: the server answers any ?hash= with its bytes.
	up.mu.Lock()
	up.corrupt["apis/apps/v1"] = true
	up.mu.Unlock()
	if _, err := f.openAPIDoc(ctx, "apis/apps/v1", real, 8<<20); errorType(err) != ErrIntegrity {
		t.Errorf("bytes not their hash: err %v, want %s", err, ErrIntegrity)
	}
}

// A key that turns routed only when a second upstream lists it may keep its decision: its fallback
// is the route it had while one upstream listed it. The reason alone changes, and it must publish a
// new Topology (the fingerprint once left it out, so the first Topology that had both indexes was
// never published when it came right after one with either).
func TestOpenAPIFingerprintRoutedOnly(t *testing.T) {
	facts := skewForMerge(t, true, true)
	facts[1].AggregatedAPIs = []string{"admissionregistration.k8s.io/v1"}
	routed := Build("t", time.Unix(100, 0), facts)
	d := routed.DecideOpenAPI(keyAdmission)
	if routed.OpenAPIRoutedOnly()[keyAdmission] == "" {
		t.Fatalf("%s: not routed only (%+v)", keyAdmission, d)
	}
	// Only the upstreams of that route list the key: the same decision, nothing routed only.
	other := slices.IndexFunc(facts, func(f UpstreamFacts) bool { return !slices.Contains(d.Set.Members(), f.Name) })
	if other < 0 {
		t.Fatalf("%s routes to every upstream (%+v): no other to list it", keyAdmission, d)
	}
	listing := facts[other].Name
	one := skewForMerge(t, true, true)
	one[1].AggregatedAPIs = facts[1].AggregatedAPIs
	for i := range one {
		if one[i].Name == listing {
			one[i].OpenAPI = loadCaptured(t, one[i].Version).withoutKeys(keyAdmission)
		}
	}
	single := Build("t", time.Unix(100, 0), one)
	if got := single.DecideOpenAPI(keyAdmission); got != d || len(single.OpenAPIRoutedOnly()) != 0 {
		t.Fatalf("with %s not listing %s: %+v, routed only %v; want %+v and none routed only", listing, keyAdmission, got, single.OpenAPIRoutedOnly(), d)
	}
	if fingerprint(single) == fingerprint(routed) {
		t.Error("a key turned routed only and the fingerprint stayed: that Topology is never published")
	}
	// The reason reaches /topology and skewgate topology with the decision.
	for _, kd := range routed.OpenAPIDecisions() {
		if kd.Key == keyAdmission && kd.Why != "routed only: "+routed.OpenAPIRoutedOnly()[keyAdmission] {
			t.Errorf("%s: why %q, want its routed-only reason", keyAdmission, kd.Why)
		}
	}
}
