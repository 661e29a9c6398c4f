package discovery

import (
	"github.com/skewgate/skewgate/internal/openapitest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// openAPIController runs a controller over static upstreams (name -> address) whose OpenAPI wants
// are *wants (nil: none), whatever Build decides.
func openAPIController(t *testing.T, pki testCA, ups map[string]string, wants *atomic.Pointer[map[string][]string], tune func(*Config)) *Controller {
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
	c.openAPIWants = func(tp *Topology) map[string][]string {
		if tp.Version == decidedVersion {
			return tp.OpenAPIWants()
		}
		if w := wants.Load(); w != nil {
			return *w
		}
		return nil
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

// decidedVersion marks a Topology a test made with its own OpenAPI decisions and wants.
const decidedVersion = "test-decided"

// heldDoc returns the document upstream name holds for key.
func heldDoc(c *Controller, name, key string) *OpenAPISpec {
	var d *OpenAPISpec
	c.read(name, func(s *upstreamState) { d = s.openapiDocs[key] })
	return d
}

func rebuilds(c *Controller) uint64 { n, _ := histogram(c.metrics.rebuildDuration); return n }

// syncOnce makes the controller run one more sync and waits for it.
func syncOnce(t *testing.T, c *Controller) {
	before := c.syncs.Load()
	c.requestSync()
	poll(t, 10*time.Second, "a sync", func() bool { return c.syncs.Load() > before })
}

// TestOpenAPIIndexKeptOnBadInput: the captured index is fetched with discovery; an invalid index is
// counted and changes nothing (same index, no Build); a valid new one is taken and rebuilds.
func TestOpenAPIIndexKeptOnBadInput(t *testing.T) {
	pki, cert := testPKI(t)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), nil)
	up.index = openapitest.File(t, "v1.36.3", "index")
	var wants atomic.Pointer[map[string][]string]
	c := openAPIController(t, pki, map[string]string{"a": up.addr()}, &wants, nil)
	poll(t, 10*time.Second, "the index", func() bool { return c.openAPIIndexOf("a") != nil })
	idx := c.openAPIIndexOf("a")
	if len(idx.Keys) != 48 || idx.Keys[keyApps] != sha512Hex(openapitest.File(t, "v1.36.3", capturedKeys[keyApps])) {
		t.Fatalf("index: %d keys, apps/v1 hash %.16s…", len(idx.Keys), idx.Keys[keyApps])
	}
	syncOnce(t, c)
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
		poll(t, 10*time.Second, "the bad index refused", func() bool { return invalid() == float64(i+1) })
		syncOnce(t, c)
		if got := c.openAPIIndexOf("a"); got != idx {
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
	poll(t, 10*time.Second, "the new index", func() bool { i := c.openAPIIndexOf("a"); return i != idx && len(i.Keys) == 1 })
	poll(t, 10*time.Second, "a rebuild for the new index", func() bool { return rebuilds(c) > builds })
}

// TestOpenAPIDocsAsWanted: no document is fetched before a Build wants it; two upstreams that name
// one hash share one fetch and one copy; a document whose bytes are not its hash is refused; the
// documents no Build wants any more are dropped.
func TestOpenAPIDocsAsWanted(t *testing.T) {
	pki, cert := testPKI(t)
	keys := []string{keyApps, keyAdmission}
	a := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), capturedDocs(t, "v1.36.3", keys...))
	b := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), capturedDocs(t, "v1.36.3", keys...))
	old := newOpenAPIUpstream(t, cert, "v1.35.4", apisDoc(false), capturedDocs(t, "v1.35.4", keys...))
	ups := map[string]*openapiUpstream{"a": a, "b": b, "old": old}
	var wants atomic.Pointer[map[string][]string]
	c := openAPIController(t, pki, map[string]string{"a": a.addr(), "b": b.addr(), "old": old.addr()}, &wants, nil)
	for name := range ups {
		poll(t, 10*time.Second, name+"'s index", func() bool { i := c.openAPIIndexOf(name); return i != nil && len(i.Keys) == 2 })
	}
	syncOnce(t, c)
	for name, up := range ups {
		for _, k := range keys {
			if n := up.requestsFor(k); n != 0 {
				t.Errorf("%s: %d requests for %s, which nobody wants", name, n, k)
			}
		}
	}

	want := func(w map[string][]string) {
		wants.Store(&w)
		c.applyOpenAPIWants(c.Current())
	}
	want(map[string][]string{"a": {keyApps}, "b": {keyApps}, "old": {keyApps}})
	for name := range ups {
		poll(t, 10*time.Second, name+" holding apps/v1", func() bool { return heldDoc(c, name, keyApps) != nil })
	}
	if heldDoc(c, "a", keyApps) != heldDoc(c, "b", keyApps) {
		t.Error("a and b hold two copies of one document")
	}
	if n := a.requestsFor(keyApps) + b.requestsFor(keyApps); n != 1 {
		t.Errorf("a and b publish one hash for apps/v1: %d fetches, want 1", n)
	}
	if n := old.requestsFor(keyApps); n != 1 {
		t.Errorf("old: %d fetches of apps/v1, want 1", n)
	}
	if n := a.requestsFor(keyAdmission) + old.requestsFor(keyAdmission); n != 0 {
		t.Errorf("%d fetches of a document nobody wants", n)
	}
	if d := heldDoc(c, "old", keyApps); d.Hash != sha512Hex(d.JSON) || d.Hash == heldDoc(c, "a", keyApps).Hash {
		t.Errorf("old holds %.16s… for a body hashing to %.16s…", d.Hash, sha512Hex(d.JSON))
	}
	wantBytes := len(openapitest.File(t, "v1.36.3", capturedKeys[keyApps])) + len(openapitest.File(t, "v1.35.4", capturedKeys[keyApps]))
	if got := testutil.ToFloat64(c.metrics.openapiHeldBytes); got != float64(wantBytes) {
		t.Errorf("held bytes %v, want %d (each hash once)", got, wantBytes)
	}

	t.Run("wanted by one upstream, kept by all", func(t *testing.T) {
		want(map[string][]string{"old": {keyApps}})
		for name := range ups {
			if heldDoc(c, name, keyApps) == nil {
				t.Errorf("%s dropped apps/v1, which a merge of the key needs", name)
			}
		}
	})

	t.Run("integrity", func(t *testing.T) {
		old.mu.Lock()
		old.corrupt[keyAdmission] = true
		old.mu.Unlock()
		integrity := func() float64 { return testutil.ToFloat64(c.metrics.fetchErrors.WithLabelValues(ErrIntegrity)) }
		before := integrity()
		want(map[string][]string{"a": {keyApps}, "b": {keyApps}, "old": {keyApps, keyAdmission}})
		poll(t, 10*time.Second, "the corrupt document refused", func() bool { return integrity() > before })
		if d := heldDoc(c, "old", keyAdmission); d != nil {
			t.Errorf("old holds a document whose bytes are not its hash")
		}
	})

	t.Run("a new hash in the index replaces the document", func(t *testing.T) {
		want(map[string][]string{"a": {keyApps}, "b": {keyApps}})
		newer := heldDoc(c, "a", keyApps)
		a.setDocs(capturedDocs(t, "v1.35.4", keys...))
		defer a.setDocs(capturedDocs(t, "v1.36.3", keys...))
		c.refetch("a")
		older := sha512Hex(openapitest.File(t, "v1.35.4", capturedKeys[keyApps]))
		poll(t, 10*time.Second, "a holding its new apps/v1", func() bool { d := heldDoc(c, "a", keyApps); return d != nil && d.Hash == older })
		if heldDoc(c, "a", keyApps) != heldDoc(c, "old", keyApps) {
			t.Error("a fetched a document old holds under the same hash")
		}
		if heldDoc(c, "b", keyApps) != newer {
			t.Error("b lost its document when a's index changed")
		}
	})

	t.Run("kept while the key needs a merge", func(t *testing.T) {
		// Wanted no more, but merged, or its merge failed and it routes to its fallback: the next
		// Build needs the documents again. The controller's own syncs meanwhile still apply the
		// wants of *wants.
		merged := &Topology{Version: decidedVersion,
			openapi: openAPIView{decisions: map[string]OpenAPIDecision{keyApps: {Action: ActionServe, Set: "old"}}}}
		c.applyOpenAPIWants(merged)
		if heldDoc(c, "a", keyApps) == nil || heldDoc(c, "b", keyApps) == nil {
			t.Error("documents of a merged key were dropped")
		}
		failed := &Topology{Version: decidedVersion, openapi: openAPIView{
			decisions: map[string]OpenAPIDecision{keyApps: {Action: ActionRoute, Set: "old"}},
			degraded:  map[string]string{keyApps: "dangling reference"}}}
		c.applyOpenAPIWants(failed)
		if heldDoc(c, "a", keyApps) == nil || heldDoc(c, "b", keyApps) == nil {
			t.Error("documents of a key whose merge failed were dropped")
		}
	})

	t.Run("dropped when routed only", func(t *testing.T) {
		// The key became an aggregated APIService's (or took an unverifiable hash): what was held for
		// its merge is never used again.
		routedOnly := &Topology{Version: decidedVersion, openapi: openAPIView{
			decisions: map[string]OpenAPIDecision{keyApps: {Action: ActionRoute, Set: "old"}},
			routed:    map[string]string{keyApps: "an aggregated APIService serves it"}}}
		c.applyOpenAPIWants(routedOnly)
		for name := range ups {
			if d := heldDoc(c, name, keyApps); d != nil {
				t.Errorf("%s still holds apps/v1", name)
			}
		}
	})

	t.Run("dropped when no longer wanted", func(t *testing.T) {
		// A key's documents stay while any upstream is asked for the key (a merge needs them all),
		// not because the key is routed: a skew resolved into a route needs no documents.
		routed := &Topology{Version: decidedVersion,
			openapi: openAPIView{decisions: map[string]OpenAPIDecision{keyApps: {Action: ActionRoute, Set: "old"}}}}
		c.applyOpenAPIWants(routed)
		want(map[string][]string{"a": {keyAdmission}})
		for name := range ups {
			if d := heldDoc(c, name, keyApps); d != nil {
				t.Errorf("%s still holds apps/v1", name)
			}
		}
		poll(t, 10*time.Second, "a holding admissionregistration/v1", func() bool { return heldDoc(c, "a", keyAdmission) != nil })
		if got, want := testutil.ToFloat64(c.metrics.openapiHeldBytes), len(openapitest.File(t, "v1.36.3", capturedKeys[keyAdmission])); got != float64(want) {
			t.Errorf("held bytes %v, want %d", got, want)
		}
		want(nil)
		if d := heldDoc(c, "a", keyAdmission); d != nil {
			t.Error("a still holds admissionregistration/v1")
		}
		if got := testutil.ToFloat64(c.metrics.openapiHeldBytes); got != 0 {
			t.Errorf("held bytes %v after every document was dropped", got)
		}
	})
}

// TestOpenAPIBudget: a document that would take the held bytes over MaxOpenAPIBytes is counted and
// not held; the one that fits is. The wants come from the Build of the controller's own sync.
func TestOpenAPIBudget(t *testing.T) {
	pki, cert := testPKI(t)
	docs := capturedDocs(t, "v1.36.3", keyApps, keyAdmission)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), docs)
	var wants atomic.Pointer[map[string][]string]
	wants.Store(&map[string][]string{"a": {keyApps, keyAdmission}})
	budget := int64(len(docs[keyApps]) + 1000)
	c := openAPIController(t, pki, map[string]string{"a": up.addr()}, &wants, func(cfg *Config) { cfg.MaxOpenAPIBytes = budget })
	poll(t, 10*time.Second, "apps/v1 held", func() bool { return heldDoc(c, "a", keyApps) != nil })
	exceeded := func() float64 { return testutil.ToFloat64(c.metrics.openapiBudgetExceeded) }
	poll(t, 10*time.Second, "the budget exceeded", func() bool { return exceeded() >= 1 })
	if heldDoc(c, "a", keyAdmission) != nil {
		t.Error("a document past the budget is held")
	}
	if got := testutil.ToFloat64(c.metrics.openapiHeldBytes); got != float64(len(docs[keyApps])) || got > float64(budget) {
		t.Errorf("held bytes %v, budget %d", got, budget)
	}
	if got := testutil.ToFloat64(c.metrics.openapiFetches.WithLabelValues(openapiDocument, resultOverBudget)); got != exceeded() {
		t.Errorf("over_budget fetches %v, budget exceeded %v", got, exceeded())
	}
}

// TestFactsAndInputsCarryOpenAPI: Build sees each upstream's index and documents, and the inputs
// digest changes with the index's hash and with each document's key and hash, and only then.
func TestFactsAndInputsCarryOpenAPI(t *testing.T) {
	pki, _ := testPKI(t)
	c, err := New(Config{Upstream: restFor(t, pki), Static: []StaticUpstream{{Name: "a", Address: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	idx := &OpenAPIIndex{Keys: map[string]string{keyApps: "H1"}, Hash: "i1"}
	doc := &OpenAPISpec{JSON: []byte("{}"), Hash: "H1"}
	s := &upstreamState{initialized: true, api: coreDoc(), apis: apisDoc(true)}
	c.states["a"] = s
	cands := []candidate{{Name: "a", Address: "127.0.0.1:1", Source: SourceStatic}}
	digest := func() [32]byte {
		facts, _, _ := c.facts(cands, time.Now())
		return inputsDigest(facts, nil)
	}
	none := digest()
	s.openapi = &OpenAPIIndex{Keys: map[string]string{}} // OpenAPI v3 off: an empty index
	empty := digest()
	s.openapi = idx
	withIndex := digest()
	s.openapiDocs = map[string]*OpenAPISpec{keyApps: doc}
	withDoc := digest()
	facts, _, _ := c.facts(cands, time.Now())
	if facts[0].OpenAPI != idx || facts[0].OpenAPIDocs[keyApps] != doc {
		t.Errorf("facts: index %p docs %v, want %p and apps/v1", facts[0].OpenAPI, facts[0].OpenAPIDocs, idx)
	}
	s.openapiDocs = map[string]*OpenAPISpec{keyApps: {JSON: []byte("{}"), Hash: "H2"}}
	otherHash := digest()
	s.openapiDocs = map[string]*OpenAPISpec{keyAdmission: doc}
	otherKey := digest()
	s.openapiDocs = map[string]*OpenAPISpec{keyApps: {JSON: []byte("other bytes, same hash"), Hash: "H1"}}
	sameHash := digest()
	s.openapi = &OpenAPIIndex{Keys: idx.Keys, Hash: "i2"}
	otherIndex := digest()
	// An aggregated APIService appearing changes what may be merged.
	c.apiServices = func() []*metav1.PartialObjectMetadata {
		return []*metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"}}}
	}
	aggregated := digest()
	if facts, _, _ := c.facts(cands, time.Now()); !slices.Equal(facts[0].AggregatedAPIs, []string{"metrics.k8s.io/v1beta1"}) {
		t.Errorf("facts: aggregated %v", facts[0].AggregatedAPIs)
	}
	c.apiServicesSynced = func() bool { return false }
	if facts, _, _ := c.facts(cands, time.Now()); !slices.Equal(facts[0].AggregatedAPIs, []string{allAggregated}) {
		t.Errorf("facts before the APIServices synced: aggregated %v, want every group-version", facts[0].AggregatedAPIs)
	}
	c.apiServicesSynced = func() bool { return true }
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
