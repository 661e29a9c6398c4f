package openapi

import (
	"strings"
	"sync"
	"time"

	"k8s.io/utils/lru"
)

// Merging a key's documents costs tens of milliseconds for api/v1 (megabytes of JSON per input), and
// a Topology is rebuilt for changes that have nothing to do with OpenAPI (readiness, Leases). A Memo
// keeps the merged documents of recent Builds by their inputs: the same key and the same documents
// (by hash, in the same order) give the same bytes, so a hit returns exactly the bytes merging again
// would, and Topologies that keep one merged document share one copy of it (xds keeps several
// published Topologies). A document fetched again (dropped, or its upstream left and came back)
// carries a new Built time but the same hash: it hits, and the merged document keeps the Built of
// its first merge, its stable Last-Modified. Bounded: at most MemoEntries documents and MemoBytes
// bytes of them, the least recently used dropped first.
const (
	MemoEntries = 64
	MemoBytes   = 64 << 20
)

// Memo is a bounded cache of merged documents. Its owner (the discovery Controller) keeps one for
// its Builds; a nil *Memo merges every time. Safe for concurrent use.
type Memo struct {
	mu       sync.Mutex
	cache    *lru.Cache // memo key -> *Spec
	bytes    int
	maxBytes int
}

// NewMemo returns an empty Memo of at most entries documents and maxBytes bytes.
func NewMemo(entries, maxBytes int) *Memo {
	m := &Memo{maxBytes: maxBytes}
	// Evictions run within Add and RemoveOldest, which run under m.mu.
	m.cache = lru.NewWithEvictionFunc(entries, func(_ lru.Key, v any) { m.bytes -= len(v.(*Spec).JSON) })
	return m
}

// memoKey identifies a merge's inputs: the key and each input's hash, in order.
func memoKey(key string, inputs []*Spec) string {
	var b strings.Builder
	b.WriteString(key)
	for _, in := range inputs {
		b.WriteByte(0)
		b.WriteString(in.Hash)
	}
	return b.String()
}

// Merge is Merge through the memo. Failures are not kept: they are cheap to find again (the parse
// or the check fails) and rare.
func (m *Memo) Merge(key string, inputs []*Spec, now time.Time) (*Spec, error) {
	if m == nil {
		return Merge(key, inputs, now)
	}
	mk := memoKey(key, inputs)
	m.mu.Lock()
	v, ok := m.cache.Get(mk)
	m.mu.Unlock()
	if ok {
		return v.(*Spec), nil
	}
	spec, err := Merge(key, inputs, now)
	if err != nil || len(spec.JSON) > m.maxBytes {
		return spec, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.cache.Get(mk); ok { // merged meanwhile by another Build: keep one
		return v.(*Spec), nil
	}
	m.cache.Add(mk, spec)
	m.bytes += len(spec.JSON)
	for m.bytes > m.maxBytes {
		m.cache.RemoveOldest()
	}
	return spec, nil
}

// Len is how many documents the memo holds.
func (m *Memo) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cache.Len()
}

// Bytes is the size of the documents the memo holds.
func (m *Memo) Bytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
