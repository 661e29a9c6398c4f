package openapi

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"
)

// Store is what the front knows of every upstream's OpenAPI v3: its last good index, the
// documents a Build wanted from it, and those documents, content-addressed. A document is found by
// key and hash in any upstream's holdings (every upstream of one version publishes the same
// documents under the same hashes), counted once in the budget however many upstreams hold it, and
// fetched once however many upstreams need it at the same time (singleflight); it is gone when the
// last upstream holding it drops it. The bytes held stay within StoreConfig.MaxBytes.
//
// Its owner (the discovery Controller) adds an upstream when it starts watching it, removes it when
// it stops, runs Fetch for it from a goroutine of its own, reads View for each Build, and hands every
// Build's wants back to Apply. StoreConfig.Changed runs after the Store's lock is released, so its
// owner may call View under a lock of its own; Metrics.HeldBytes runs under it, so the last value
// reported is the current one.
type Store struct {
	cfg    StoreConfig
	flight singleflight.Group // key "\x00" hash -> the fetch of that document

	mu         sync.Mutex
	ups        map[string]*holdings
	overBudget bool // the last document refused for the budget was logged
}

// StoreConfig is what a Store needs.
type StoreConfig struct {
	// MaxBytes caps the bytes of the documents held, all upstreams together.
	MaxBytes int64
	// MaxDocumentBytes is the largest document accepted.
	MaxDocumentBytes int64
	// RequestTimeout bounds each fetch.
	RequestTimeout time.Duration
	// Clock stamps a fetched document's Built.
	Clock clock.PassiveClock
	// Metrics receives every fetch's result (required).
	Metrics Metrics
	// ErrorType names a failed fetch's error (a metric label).
	ErrorType func(error) string
	// Changed is called, outside the Store's lock, when something a Build reads (View) changed.
	Changed func()
}

// Metrics is what a Store reports. what is "index" or "document"; result a Result* or an error type.
type Metrics interface {
	Fetched(what, result string)
	FetchFailed(errorType string)
	BudgetExceeded()
	HeldBytes(n int64)
}

// Values of Metrics.Fetched's what and result.
const (
	WhatIndex        = "index"
	WhatDocument     = "document"
	ResultOK         = "ok"
	ResultUnchanged  = "unchanged"   // an index with the bytes of the last one
	ResultNotFound   = "not_found"   // an index answered 404: OpenAPI v3 off on that upstream
	ResultShared     = "shared"      // a document another upstream already holds under the same hash
	ResultOverBudget = "over_budget" // not fetched or not kept: MaxBytes
)

// holdings is one upstream's part of the Store.
type holdings struct {
	index   *Index           // nil until fetched once; the last good index
	docs    map[string]*Spec // key -> document under the hash index names; replaced, never modified
	docsID  string           // the keys and hashes of docs
	wants   []string         // keys whose documents the last Build wanted from this upstream
	failing bool             // the last index fetch failed (logged once)
	docErrs map[string]string
}

// NewStore returns an empty Store.
func NewStore(cfg StoreConfig) *Store {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Changed == nil {
		cfg.Changed = func() {}
	}
	return &Store{cfg: cfg, ups: map[string]*holdings{}}
}

// Add starts holding for upstream name (nothing yet); a known name keeps what it holds.
func (s *Store) Add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ups[name] == nil {
		s.ups[name] = &holdings{}
	}
}

// Remove forgets upstream name and drops the documents only it held.
func (s *Store) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ups, name)
	s.cfg.Metrics.HeldBytes(s.heldBytesLocked())
}

// View returns what upstream name contributes to a Build: its last good index (nil until fetched
// once), its documents by key (never modified) and an identifier of their keys and hashes.
func (s *Store) View(name string) (index *Index, docs map[string]*Spec, docsID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.ups[name]; h != nil {
		return h.index, h.docs, h.docsID
	}
	return nil, nil, ""
}

// Index returns the last good index of upstream name, nil until fetched once.
func (s *Store) Index(name string) *Index {
	idx, _, _ := s.View(name)
	return idx
}

// Document returns the document of key upstream name holds, or nil.
func (s *Store) Document(name, key string) *Spec {
	_, docs, _ := s.View(name)
	return docs[key]
}

// HeldBytes is the bytes of the documents held, each hash once.
func (s *Store) HeldBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldBytesLocked()
}

// Apply takes the documents a new Build wants (Result.Wants, by upstream): each upstream's wants
// replace its last, and documents of keys keep rejects are dropped. It returns whether any was
// dropped and the upstreams that lack a wanted document (to fetch now).
//
// The caller keeps a document while its key needs a merge: wanted from any upstream (a merge needs
// every upstream's), merged (ActionServe), or degraded (its merge waits for documents or failed and
// the key falls back to a route). The last two keep what a merge used once it no longer wants
// anything: dropping the documents then would make the next Build want them again, a fetch loop. A
// key that no longer needs a merge (its skew resolved into a route or the default) drops them. A
// document whose hash leaves its upstream's index (an upgrade) is dropped with the old index; the
// budget bounds the rest.
func (s *Store) Apply(wants map[string][]string, keep func(key string) bool) (dropped bool, lacking []string) {
	s.mu.Lock()
	for name, h := range s.ups {
		h.wants = wants[name]
		before := h.docsID
		s.keepDocsLocked(h, func(key string, _ *Spec) bool { return keep(key) })
		dropped = dropped || h.docsID != before
		if len(h.missing()) > 0 {
			lacking = append(lacking, name)
		}
		maps.DeleteFunc(h.docErrs, func(key, _ string) bool { return !slices.Contains(h.wants, key) })
	}
	s.cfg.Metrics.HeldBytes(s.heldBytesLocked()) // also after an upstream left with its documents
	s.mu.Unlock()
	slices.Sort(lacking)
	return dropped, lacking
}

// holdLocked gives upstream name the document d for key, if it still wants it under d's hash (the
// index or the wants may have changed during the fetch); changed: its documents changed.
func (s *Store) holdLocked(name, key string, d *Spec) (changed bool) {
	h := s.ups[name]
	if h == nil || h.index == nil || h.index.Keys[key] != d.Hash || !slices.Contains(h.wants, key) || h.docs[key] == d {
		return false
	}
	docs := maps.Clone(h.docs)
	if docs == nil {
		docs = map[string]*Spec{}
	}
	docs[key] = d
	h.docs, h.docsID = docs, docsID(docs)
	delete(h.docErrs, key)
	return true
}

// keepDocsLocked keeps the upstream's documents for which keep is true, replacing the map if any goes.
func (s *Store) keepDocsLocked(h *holdings, keep func(key string, d *Spec) bool) {
	var docs map[string]*Spec
	for k, d := range h.docs {
		if keep(k, d) {
			if docs == nil {
				docs = map[string]*Spec{}
			}
			docs[k] = d
		}
	}
	if len(docs) != len(h.docs) {
		h.docs, h.docsID = docs, docsID(docs)
	}
}

func docsID(docs map[string]*Spec) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(docs)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(docs[k].Hash)
		b.WriteByte(';')
	}
	return b.String()
}

// heldLocked returns the document of key any upstream holds under hash. Shared by key and hash,
// never by hash alone, and only for a hash of handler3's form: a document is held only once its
// bytes hashed to it (FetchDocument), so another upstream publishing that hash for the key would
// serve these very bytes. Any other hash proves nothing and is never shared.
func (s *Store) heldLocked(key, hash string) *Spec {
	if !IsSHA512Hex(hash) {
		return nil
	}
	for _, h := range s.ups {
		if d := h.docs[key]; d != nil && d.Hash == hash {
			return d
		}
	}
	return nil
}

// heldBytesLocked sums the bytes of the documents held, each hash once.
func (s *Store) heldBytesLocked() int64 {
	seen := map[string]bool{}
	var n int64
	for _, h := range s.ups {
		for _, d := range h.docs {
			if !seen[d.Hash] {
				seen[d.Hash] = true
				n += int64(len(d.JSON))
			}
		}
	}
	return n
}

// want is a document to fetch.
type want struct{ key, hash string }

// missing lists the wanted keys the index names and no held document has the hash of.
func (h *holdings) missing() []want {
	if h.index == nil {
		return nil
	}
	var out []want
	for _, k := range h.wants {
		hash, ok := h.index.Keys[k]
		if d := h.docs[k]; ok && (d == nil || d.Hash != hash) {
			out = append(out, want{k, hash})
		}
	}
	return out
}
