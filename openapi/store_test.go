package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/skewgate/skewgate/internal/openapitest"
)

// fakeUpstream serves /openapi/v3 and its documents as an apiserver does: the aggregator's index
// (no ETag, text/plain) and handler3's documents (ETag, 301 for a stale hash, 404 for an unknown key).
type fakeUpstream struct {
	mu      sync.Mutex
	index   []byte            // nil: built from docs
	docs    map[string][]byte // key -> document
	corrupt map[string]bool   // serve other bytes under the document's hash
	reqs    map[string]int    // document requests by key
	idxReqs int
	// entered, when set, gets a value when a document request arrives, which then waits for release.
	entered, release chan struct{}
}

func newFake(docs map[string][]byte) *fakeUpstream {
	return &fakeUpstream{docs: docs, corrupt: map[string]bool{}, reqs: map[string]int{}}
}

func (o *fakeUpstream) get(_ context.Context, path string) (*http.Response, error) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	w := httptest.NewRecorder()
	o.ServeHTTP(w, r)
	return w.Result(), nil
}

func (o *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.entered != nil && r.URL.Path != Prefix {
		o.entered <- struct{}{}
		<-o.release
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path == Prefix {
		o.idxReqs++
		data := o.index
		if data == nil {
			paths := map[string]map[string]string{}
			for k, d := range o.docs {
				paths[k] = map[string]string{"serverRelativeURL": Prefix + "/" + k + "?hash=" + Hash(d)}
			}
			data, _ = json.Marshal(map[string]any{"paths": paths})
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(data)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, Prefix+"/")
	o.reqs[key]++
	body, ok := o.docs[key]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	h := Hash(body)
	w.Header().Set("Etag", `"`+h+`"`)
	if q := r.URL.Query().Get("hash"); q != "" && q != h {
		http.Redirect(w, r, Prefix+"/"+key+"?hash="+h, http.StatusMovedPermanently)
		return
	}
	if o.corrupt[key] {
		body = bytes.Clone(body)
		body[len(body)/2] ^= 1
	}
	w.Write(body)
}

func (o *fakeUpstream) requests(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reqs[key]
}

func (o *fakeUpstream) setDocs(docs map[string][]byte) {
	o.mu.Lock()
	o.docs = docs
	o.mu.Unlock()
}

// countingMetrics records what a Store reports.
type countingMetrics struct {
	mu      sync.Mutex
	fetched map[string]int // what/result
	failed  map[string]int
	budget  int
	held    int64
}

func (m *countingMetrics) Fetched(what, result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetched[what+"/"+result]++
}
func (m *countingMetrics) FetchFailed(typ string) { m.mu.Lock(); m.failed[typ]++; m.mu.Unlock() }
func (m *countingMetrics) BudgetExceeded()        { m.mu.Lock(); m.budget++; m.mu.Unlock() }
func (m *countingMetrics) HeldBytes(n int64)      { m.mu.Lock(); m.held = n; m.mu.Unlock() }
func (m *countingMetrics) count(what, result string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fetched[what+"/"+result]
}

func errType(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Type
	}
	return "connect"
}

// storeOf returns a Store over the fake upstreams (name -> upstream), each added, and a fetch that
// runs its Fetch for one of them.
func storeOf(t *testing.T, ups map[string]*fakeUpstream, maxBytes int64) (*Store, *countingMetrics, *int, func(name string)) {
	m := &countingMetrics{fetched: map[string]int{}, failed: map[string]int{}}
	changes := new(int)
	var mu sync.Mutex
	s := NewStore(StoreConfig{MaxBytes: maxBytes, MaxDocumentBytes: 8 << 20, RequestTimeout: 10 * time.Second,
		Clock: testingclock.NewFakePassiveClock(time.Unix(1000, 0)), Metrics: m, ErrorType: errType,
		Changed: func() { mu.Lock(); *changes++; mu.Unlock() }})
	for name := range ups {
		s.Add(name)
	}
	log := zaptest.NewLogger(t)
	return s, m, changes, func(name string) { s.Fetch(context.Background(), name, ups[name].get, log) }
}

func capturedDocs(t testing.TB, version string, keys ...string) map[string][]byte {
	docs := map[string][]byte{}
	for _, k := range keys {
		docs[k] = openapitest.File(t, version, capturedKeys[k])
	}
	return docs
}

// An invalid index is counted and changes nothing (the last good one stays, no change reported); a
// valid new one is taken.
func TestStoreIndexKeptOnBadInput(t *testing.T) {
	up := newFake(nil)
	up.index = openapitest.File(t, v136, "index")
	s, m, changes, fetch := storeOf(t, map[string]*fakeUpstream{"a": up}, 64<<20)
	fetch("a")
	idx := s.Index("a")
	if idx == nil || len(idx.Keys) != 48 || idx.Keys[keyApps] != sha512Hex(openapitest.File(t, v136, capturedKeys[keyApps])) {
		t.Fatalf("index %v", idx)
	}
	if *changes != 1 {
		t.Fatalf("%d changes for the first index, want 1", *changes)
	}
	fetch("a")
	if s.Index("a") != idx || m.count(WhatIndex, ResultUnchanged) != 1 || *changes != 1 {
		t.Errorf("the same bytes again: index replaced %v, unchanged %d, changes %d", s.Index("a") != idx, m.count(WhatIndex, ResultUnchanged), *changes)
	}
	for i, bad := range []string{
		`{"paths":{"../etc":{"serverRelativeURL":"/openapi/v3/../etc?hash=1"}}}`,
		`{"paths":{"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/batch/v1?hash=1"}}}`,
		`{"paths":{},"extra":true}`,
		`{"Paths":{}}`,
	} {
		up.mu.Lock()
		up.index = []byte(bad)
		up.mu.Unlock()
		fetch("a")
		if got := m.count(WhatIndex, ErrInvalid); got != i+1 {
			t.Errorf("bad index %d: %d invalid, want %d", i, got, i+1)
		}
		if s.Index("a") != idx || *changes != 1 {
			t.Fatalf("bad index %d replaced the last good one (changes %d)", i, *changes)
		}
	}
	if m.failed[ErrInvalid] != 4 {
		t.Errorf("fetch errors (invalid) = %d, want 4", m.failed[ErrInvalid])
	}
	up.mu.Lock()
	up.index = nil // built from the documents: one key
	up.docs = capturedDocs(t, v136, keyApps)
	up.mu.Unlock()
	fetch("a")
	if i := s.Index("a"); i == idx || len(i.Keys) != 1 || *changes != 2 {
		t.Errorf("new index %v, changes %d", i, *changes)
	}
}

// No document is fetched before it is wanted; two upstreams that name one hash share one fetch and
// one copy; a document whose bytes are not its hash is refused; a new hash replaces a document;
// documents no Build keeps are dropped.
func TestStoreDocsAsWanted(t *testing.T) {
	keys := []string{keyApps, keyAdmission}
	a, b, old := newFake(capturedDocs(t, v136, keys...)), newFake(capturedDocs(t, v136, keys...)), newFake(capturedDocs(t, v135, keys...))
	ups := map[string]*fakeUpstream{"a": a, "b": b, "old": old}
	s, m, _, fetch := storeOf(t, ups, 64<<20)
	all := func() {
		for _, n := range []string{"a", "b", "old"} {
			fetch(n)
		}
	}
	all()
	for name, up := range ups {
		if i := s.Index(name); i == nil || len(i.Keys) != 2 {
			t.Fatalf("%s's index %v", name, i)
		}
		for _, k := range keys {
			if n := up.requests(k); n != 0 {
				t.Errorf("%s: %d requests for %s, which nobody wants", name, n, k)
			}
		}
	}
	keepAll := func(string) bool { return true }
	_, lacking := s.Apply(map[string][]string{"a": {keyApps}, "b": {keyApps}, "old": {keyApps}}, keepAll)
	if strings.Join(lacking, ",") != "a,b,old" {
		t.Errorf("lacking %v", lacking)
	}
	all()
	if s.Document("a", keyApps) == nil || s.Document("a", keyApps) != s.Document("b", keyApps) {
		t.Error("a and b do not hold one copy of one document")
	}
	if n := a.requests(keyApps) + b.requests(keyApps); n != 1 {
		t.Errorf("a and b publish one hash for apps/v1: %d fetches, want 1", n)
	}
	if m.count(WhatDocument, ResultShared) != 1 || m.count(WhatDocument, ResultOK) != 2 {
		t.Errorf("fetched %v", m.fetched)
	}
	if d := s.Document("old", keyApps); d == nil || d.Hash != sha512Hex(d.JSON) || d.Hash == s.Document("a", keyApps).Hash || !d.Built.Equal(time.Unix(1000, 0)) {
		t.Errorf("old holds %v", d)
	}
	wantBytes := int64(len(openapitest.File(t, v136, capturedKeys[keyApps])) + len(openapitest.File(t, v135, capturedKeys[keyApps])))
	if s.HeldBytes() != wantBytes || m.held != wantBytes {
		t.Errorf("held bytes %d (reported %d), want %d (each hash once)", s.HeldBytes(), m.held, wantBytes)
	}

	t.Run("integrity", func(t *testing.T) {
		old.mu.Lock()
		old.corrupt[keyAdmission] = true
		old.mu.Unlock()
		s.Apply(map[string][]string{"a": {keyApps}, "b": {keyApps}, "old": {keyApps, keyAdmission}}, keepAll)
		fetch("old")
		if m.failed[ErrIntegrity] != 1 || s.Document("old", keyAdmission) != nil {
			t.Errorf("integrity errors %d, held %v", m.failed[ErrIntegrity], s.Document("old", keyAdmission) != nil)
		}
	})

	t.Run("a new hash in the index replaces the document", func(t *testing.T) {
		s.Apply(map[string][]string{"a": {keyApps}, "b": {keyApps}, "old": {keyApps}}, keepAll)
		newer := s.Document("a", keyApps)
		a.setDocs(capturedDocs(t, v135, keys...))
		fetch("a")
		if d := s.Document("a", keyApps); d == nil || d != s.Document("old", keyApps) {
			t.Error("a did not take the document old holds under its new hash")
		}
		if s.Document("b", keyApps) != newer {
			t.Error("b lost its document when a's index changed")
		}
		a.setDocs(capturedDocs(t, v136, keys...))
		fetch("a")
	})

	t.Run("a moved document refetches the index", func(t *testing.T) {
		s.Apply(map[string][]string{"b": {keyAdmission}}, keepAll)
		b.setDocs(capturedDocs(t, v135, keys...)) // the index b's Store holds is stale now
		s.fetchDocs(context.Background(), "b", b.get, zaptest.NewLogger(t))
		if m.count(WhatDocument, ErrMoved) != 1 {
			t.Fatalf("moved %d, want 1", m.count(WhatDocument, ErrMoved))
		}
		fetch("b")
		if d := s.Document("b", keyAdmission); d == nil || d.Hash != Hash(openapitest.File(t, v135, capturedKeys[keyAdmission])) {
			t.Errorf("b holds %v after its index moved", d)
		}
		b.setDocs(capturedDocs(t, v136, keys...))
		fetch("b")
	})

	t.Run("dropped when not kept", func(t *testing.T) {
		if dropped, _ := s.Apply(nil, func(k string) bool { return k == keyAdmission }); !dropped {
			t.Error("nothing dropped")
		}
		for name := range ups {
			if s.Document(name, keyApps) != nil {
				t.Errorf("%s still holds apps/v1", name)
			}
		}
		s.Apply(nil, func(string) bool { return false })
		if s.HeldBytes() != 0 || m.held != 0 {
			t.Errorf("held bytes %d (reported %d) after every document was dropped", s.HeldBytes(), m.held)
		}
	})

	t.Run("removed upstream", func(t *testing.T) {
		s.Apply(map[string][]string{"a": {keyApps}}, keepAll)
		fetch("a")
		s.Remove("a")
		if s.Index("a") != nil || s.HeldBytes() != 0 || m.held != 0 {
			t.Errorf("a removed: index %v, held %d", s.Index("a") != nil, s.HeldBytes())
		}
		fetch("a") // a worker still finishing: nothing comes back
		if s.Index("a") != nil {
			t.Error("a fetch for a removed upstream was kept")
		}
	})
}

// A document that would take the held bytes over the budget is counted and not held; the one that
// fits is.
func TestStoreBudget(t *testing.T) {
	docs := capturedDocs(t, v136, keyApps, keyAdmission)
	budget := int64(len(docs[keyApps]) + 1000)
	s, m, _, fetch := storeOf(t, map[string]*fakeUpstream{"a": newFake(docs)}, budget)
	fetch("a")
	s.Apply(map[string][]string{"a": {keyApps, keyAdmission}}, func(string) bool { return true })
	fetch("a")
	if s.Document("a", keyApps) == nil || s.Document("a", keyAdmission) != nil {
		t.Errorf("held apps/v1 %v, admissionregistration %v; want only the first", s.Document("a", keyApps) != nil, s.Document("a", keyAdmission) != nil)
	}
	if s.HeldBytes() != int64(len(docs[keyApps])) || m.budget != 1 || m.count(WhatDocument, ResultOverBudget) != 1 {
		t.Errorf("held %d, budget exceeded %d, over_budget %d", s.HeldBytes(), m.budget, m.count(WhatDocument, ResultOverBudget))
	}
}

// A document held under a hash that is not a SHA-512 is never shared with another upstream.
func TestStoreSharesOnlyOnVerifiedHash(t *testing.T) {
	s := NewStore(StoreConfig{Metrics: &countingMetrics{fetched: map[string]int{}, failed: map[string]int{}}})
	doc := loadCaptured(t, v136).docs[keyApps]
	s.ups["a"] = &holdings{docs: map[string]*Spec{keyApps: doc, keyCore: {JSON: []byte(`{}`), Hash: "evil"}}}
	if got := s.heldLocked(keyApps, doc.Hash); got != doc {
		t.Errorf("verified hash not shared")
	}
	if got := s.heldLocked(keyCore, "evil"); got != nil {
		t.Errorf("shared a document under the unverifiable hash %q", got.Hash)
	}
	if got := s.heldLocked(keyCore, doc.Hash); got != nil {
		t.Errorf("shared another key's document by its hash")
	}
}

// Upstreams asking for one document while it is being fetched join that fetch (singleflight): one
// request, one copy (run with -race).
func TestStoreConcurrentFetches(t *testing.T) {
	docs := capturedDocs(t, v136, keyApps)
	ups := map[string]*fakeUpstream{}
	wants := map[string][]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		ups[n] = newFake(docs)
		wants[n] = []string{keyApps}
	}
	s, m, _, fetch := storeOf(t, ups, 64<<20)
	for n := range ups {
		fetch(n)
	}
	s.Apply(wants, func(string) bool { return true })
	a := ups["a"]
	a.entered, a.release = make(chan struct{}, 1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); fetch("a") }()
	<-a.entered // a's fetch of the document is in flight
	for _, n := range []string{"b", "c", "d"} {
		wg.Add(1)
		go func() { defer wg.Done(); fetch(n) }()
	}
	// Each has fetched its index (the step before the document) before a's fetch ends.
	for _, n := range []string{"b", "c", "d"} {
		for {
			ups[n].mu.Lock()
			done := ups[n].idxReqs == 2
			ups[n].mu.Unlock()
			if done {
				break
			}
			runtime.Gosched()
		}
	}
	close(a.release)
	wg.Wait()
	total := 0
	for n, up := range ups {
		total += up.requests(keyApps)
		if d := s.Document(n, keyApps); d == nil || d != s.Document("a", keyApps) {
			t.Errorf("%s holds another copy, or none", n)
		}
	}
	if total != 1 || m.count(WhatDocument, ResultOK) != 1 || m.count(WhatDocument, ResultShared) != 3 {
		t.Errorf("%d fetches (ok %d, shared %d), want 1 and 3 shared", total, m.count(WhatDocument, ResultOK), m.count(WhatDocument, ResultShared))
	}
}
