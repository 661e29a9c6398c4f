package discovery

import (
	"strings"
	"sync"
	"time"
)

// Merging a key's documents costs tens of milliseconds for api/v1 (megabytes of JSON per input), and
// a Topology is rebuilt for changes that have nothing to do with OpenAPI (readiness, Leases). The
// merged documents of recent Builds are kept by their inputs: the same key and the same documents
// (by hash, in the same order) give the same bytes, so a hit returns exactly the bytes merging again
// would, and Topologies that keep one merged document share one copy of it (xds keeps several
// published Topologies). A document fetched again (dropped, or its upstream left and came back)
// carries a new Built time but the same hash: it hits, and the merged document keeps the Built of
// its first merge, its stable Last-Modified. Bounded: at most mergeMemoEntries documents and
// mergeMemoBytes bytes of them, the least recently used dropped first.
const (
	mergeMemoEntries = 64
	mergeMemoBytes   = 64 << 20
)

type mergeMemoEntry struct {
	spec *OpenAPISpec
	used uint64
}

var mergeMemo = struct {
	sync.Mutex
	entries map[string]*mergeMemoEntry
	bytes   int
	clock   uint64
}{entries: map[string]*mergeMemoEntry{}}

// mergeMemoKey identifies a merge's inputs: the key and each input's hash, in order.
func mergeMemoKey(key string, inputs []*OpenAPISpec) string {
	var b strings.Builder
	b.WriteString(key)
	for _, in := range inputs {
		b.WriteByte(0)
		b.WriteString(in.Hash)
	}
	return b.String()
}

// mergeOpenAPIMemo is mergeOpenAPI through the memo. Failures are not kept: they are cheap to find
// again (the parse or the check fails) and rare.
func mergeOpenAPIMemo(key string, inputs []*OpenAPISpec, now time.Time) (*OpenAPISpec, error) {
	mk := mergeMemoKey(key, inputs)
	m := &mergeMemo
	m.Lock()
	m.clock++
	if e := m.entries[mk]; e != nil {
		e.used = m.clock
		m.Unlock()
		return e.spec, nil
	}
	m.Unlock()
	spec, err := mergeOpenAPI(key, inputs, now)
	if err != nil || len(spec.JSON) > mergeMemoBytes {
		return spec, err
	}
	m.Lock()
	defer m.Unlock()
	if e := m.entries[mk]; e != nil { // merged meanwhile by another Build: keep one
		return e.spec, nil
	}
	for len(m.entries) >= mergeMemoEntries || m.bytes+len(spec.JSON) > mergeMemoBytes {
		var oldest string
		var used uint64
		for k, e := range m.entries {
			if oldest == "" || e.used < used {
				oldest, used = k, e.used
			}
		}
		m.bytes -= len(m.entries[oldest].spec.JSON)
		delete(m.entries, oldest)
	}
	m.entries[mk] = &mergeMemoEntry{spec: spec, used: m.clock}
	m.bytes += len(spec.JSON)
	return spec, nil
}

// resetMergeMemo forgets every merged document (tests and benchmarks).
func resetMergeMemo() {
	m := &mergeMemo
	m.Lock()
	defer m.Unlock()
	m.entries, m.bytes = map[string]*mergeMemoEntry{}, 0
}
