package discovery

import (
	"github.com/skewgate/skewgate/internal/openapitest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// openAPIController runs a controller over static upstreams (name -> address).
func openAPIController(t *testing.T, pki testCA, ups map[string]string, tune func(*Config)) *Controller {
	t.Helper()
	cfg := Config{Upstream: restFor(t, pki), ProbeInterval: 20 * time.Millisecond, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)}
	for name, addr := range ups {
		cfg.Static = append(cfg.Static, StaticUpstream{Name: name, Address: addr})
	}
	if tune != nil {
		tune(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	waitFor(t, c, "every upstream ready with capabilities", func(tp *Topology) bool {
		for name := range ups {
			if u, ok := tp.Upstream(name); !ok || !u.Ready || !u.Capabilities {
				return false
			}
		}
		return true
	})
	return c
}

func rebuilds(c *Controller) uint64 { n, _ := histogram(c.metrics.rebuildDuration); return n }

// TestOpenAPIIndexKeptOnBadInput: the captured index is fetched with discovery; an invalid index is
// counted and changes nothing (same index, no Build); a valid new one is taken and rebuilds.
func TestOpenAPIIndexKeptOnBadInput(t *testing.T) {
	pki, cert := testPKI(t)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), nil)
	up.index = openapitest.File(t, "v1.36.3", "index")
	c := openAPIController(t, pki, map[string]string{"a": up.addr()}, nil)
	poll(t, 10*time.Second, "the index", func() bool { return c.openapi.Index("a") != nil })
	idx := c.openapi.Index("a")
	if len(idx.Keys) != 48 || idx.Keys[keyApps] != sha512Hex(openapitest.File(t, "v1.36.3", capturedKeys[keyApps])) {
		t.Fatalf("index: %d keys, apps/v1 hash %.16s…", len(idx.Keys), idx.Keys[keyApps])
	}
	// Settled: the Topology is built from this index (its decision names the index's hash).
	waitFor(t, c, "the index in the Topology", func(tp *Topology) bool { return tp.DecideOpenAPI(keyApps).Hash == idx.Keys[keyApps] })
	builds := rebuilds(c)

	invalid := func() float64 {
		return testutil.ToFloat64(c.metrics.openapiFetches.WithLabelValues(openapiIndex, ErrInvalid))
	}
	for i, bad := range []string{
		`{"paths":{"../etc":{"serverRelativeURL":"/openapi/v3/../etc?hash=1"}}}`,
		`{"paths":{"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/batch/v1?hash=1"}}}`,
		`{"paths":{},"extra":true}`,
	} {
		up.mu.Lock()
		up.index = []byte(bad)
		up.mu.Unlock()
		c.refetch("a")
		// A refused index asks for no sync (the Store reports no change), so no Build can follow it.
		poll(t, 10*time.Second, "the bad index refused", func() bool { return invalid() == float64(i+1) })
		if got := c.openapi.Index("a"); got != idx {
			t.Fatalf("bad index %d replaced the last good one", i)
		}
		if got := rebuilds(c); got != builds {
			t.Fatalf("bad index %d: %d rebuilds, want none", i, got-builds)
		}
	}
	if got := testutil.ToFloat64(c.metrics.fetchErrors.WithLabelValues(ErrInvalid)); got != 3 {
		t.Errorf("fetch errors (invalid) = %v, want 3", got)
	}
	// A discovery fetch is not failed by its index.
	if u, _ := c.Current().Upstream("a"); u.Stale || !u.Capabilities {
		t.Errorf("upstream %+v after bad indexes", u)
	}

	up.mu.Lock()
	up.index = nil // built from the documents: one key
	up.docs = capturedDocs(t, "v1.36.3", keyApps)
	up.mu.Unlock()
	c.refetch("a")
	poll(t, 10*time.Second, "the new index", func() bool { i := c.openapi.Index("a"); return i != idx && len(i.Keys) == 1 })
	poll(t, 10*time.Second, "a rebuild for the new index", func() bool { return rebuilds(c) > builds })
}

// TestOpenAPIDocsForAMerge: the documents a Build wants reach the Store, are fetched (once per
// hash) and merged by the next Build, which wants nothing more; once the skew is gone they are dropped.
func TestOpenAPIDocsForAMerge(t *testing.T) {
	pki, cert := testPKI(t)
	// Each lacks a resource of admissionregistration.k8s.io/v1 the other serves: a merge.
	noVAP := &Document{Hash: "apis-136-no-vap", Groups: []apidiscoveryv2.APIGroupDiscovery{
		group("apps", version("v1", res("deployments", allVerbs, sub("scale", "get", "patch", "update")))),
		group("admissionregistration.k8s.io", version("v1", res("mutatingadmissionpolicies", allVerbs), res("mutatingadmissionpolicybindings", allVerbs))),
	}}
	nw := newOpenAPIUpstream(t, cert, "v1.36.3", noVAP, capturedDocs(t, "v1.36.3", keyAdmission))
	old := newOpenAPIUpstream(t, cert, "v1.35.4", apisDoc(false), capturedDocs(t, "v1.35.4", keyAdmission))
	c := openAPIController(t, pki, map[string]string{"new": nw.addr(), "old": old.addr()}, nil)
	top := waitFor(t, c, "the merged admissionregistration.k8s.io/v1", func(tp *Topology) bool {
		return tp.OpenAPIMerged(keyAdmission) != nil
	})
	if d := top.DecideOpenAPI(keyAdmission); d.Action != ActionServe || len(top.OpenAPIWants()) != 0 {
		t.Errorf("decision %+v, wants %v", d, top.OpenAPIWants())
	}
	if n, o := nw.requestsFor(keyAdmission), old.requestsFor(keyAdmission); n != 1 || o != 1 {
		t.Errorf("fetches new %d, old %d, want 1 each", n, o)
	}
	want := float64(len(heldDoc(c, "new", keyAdmission).JSON) + len(heldDoc(c, "old", keyAdmission).JSON))
	if got := testutil.ToFloat64(c.metrics.openapiHeldBytes); got != want {
		t.Errorf("held bytes %v, want %v", got, want)
	}
	// The skew resolves: new serves everything again, the key routes, its documents go.
	nw.set("v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
	c.refetch("new")
	waitFor(t, c, "the key routed", func(tp *Topology) bool { return tp.DecideOpenAPI(keyAdmission).Action == ActionRoute })
	poll(t, 10*time.Second, "the documents dropped", func() bool { return testutil.ToFloat64(c.metrics.openapiHeldBytes) == 0 })
	if heldDoc(c, "new", keyAdmission) != nil || heldDoc(c, "old", keyAdmission) != nil {
		t.Error("documents of a key that needs no merge are held")
	}
}

// TestInputsCarryOpenAPI: the inputs digest changes with the index's hash and with each document's
// key and hash, and only then; facts carry the APIServices that make a key routed only.
func TestInputsCarryOpenAPI(t *testing.T) {
	pki, _ := testPKI(t)
	c, err := New(Config{Upstream: restFor(t, pki), Static: []StaticUpstream{{Name: "a", Address: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	idx := &OpenAPIIndex{Keys: map[string]string{keyApps: "H1"}, Hash: "i1"}
	doc := &OpenAPISpec{JSON: []byte("{}"), Hash: "H1"}
	c.states["a"] = &upstreamState{initialized: true, api: coreDoc(), apis: apisDoc(true)}
	c.openapi.Add("a")
	cands := []candidate{{Name: "a", Address: "127.0.0.1:1", Source: SourceStatic}}
	facts, _, _ := c.facts(cands, time.Now())
	if facts[0].OpenAPI != nil || facts[0].OpenAPIDocs != nil {
		t.Fatalf("facts before any fetch: index %v docs %v", facts[0].OpenAPI, facts[0].OpenAPIDocs)
	}
	digest := func(idx *OpenAPIIndex, docs map[string]*OpenAPISpec) [32]byte {
		f := slices.Clone(facts)
		f[0].OpenAPI, f[0].OpenAPIDocs = idx, docs
		return inputsDigest(f, nil)
	}
	none := digest(nil, nil)
	empty := digest(&OpenAPIIndex{Keys: map[string]string{}}, nil) // OpenAPI v3 off: an empty index
	withIndex := digest(idx, nil)
	withDoc := digest(idx, map[string]*OpenAPISpec{keyApps: doc})
	otherHash := digest(idx, map[string]*OpenAPISpec{keyApps: {JSON: []byte("{}"), Hash: "H2"}})
	otherKey := digest(idx, map[string]*OpenAPISpec{keyAdmission: doc})
	sameHash := digest(idx, map[string]*OpenAPISpec{keyApps: {JSON: []byte("other bytes, same hash"), Hash: "H1"}})
	otherIndex := digest(&OpenAPIIndex{Keys: idx.Keys, Hash: "i2"}, map[string]*OpenAPISpec{keyApps: {JSON: []byte("other bytes, same hash"), Hash: "H1"}})
	// An aggregated APIService appearing changes what may be merged.
	c.apiServices = func() []*metav1.PartialObjectMetadata {
		return []*metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"}}}
	}
	facts, _, _ = c.facts(cands, time.Now())
	aggregated := digest(nil, nil)
	if !slices.Equal(facts[0].AggregatedAPIs, []string{"metrics.k8s.io/v1beta1"}) {
		t.Errorf("facts: aggregated %v", facts[0].AggregatedAPIs)
	}
	c.apiServicesSynced = func() bool { return false }
	if facts, _, _ := c.facts(cands, time.Now()); !slices.Equal(facts[0].AggregatedAPIs, []string{allAggregated}) {
		t.Errorf("facts before the APIServices synced: aggregated %v, want every group-version", facts[0].AggregatedAPIs)
	}
	all := map[string][32]byte{"none": none, "empty": empty, "index": withIndex, "doc": withDoc, "doc hash": otherHash,
		"doc key": otherKey, "other index": otherIndex, "aggregated": aggregated}
	seen := map[[32]byte]string{}
	for name, d := range all {
		if prev, ok := seen[d]; ok {
			t.Errorf("inputs %q and %q have one digest", name, prev)
		}
		seen[d] = name
	}
	if sameHash != withDoc {
		t.Error("documents are identified by their hash, yet equal hashes gave two digests")
	}
}
