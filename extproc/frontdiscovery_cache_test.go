package extproc

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
)

// largeTopology has n resources spread over groups of 10 (one version each), served by two upstreams
// of which one serves a tenth more.
func largeTopology(n int) *discovery.Topology {
	var groups []apidiscoveryv2.APIGroupDiscovery
	for i := 0; i < n; i += 10 {
		var rs []apidiscoveryv2.APIResourceDiscovery
		for j := i; j < min(i+10, n); j++ {
			rs = append(rs, rsc("things"+strconv.Itoa(j)+"s", "status", "scale"))
		}
		groups = append(groups, grp("g"+strconv.Itoa(i/10)+".example.com", "v1", rs...))
	}
	core := doc("core", grp("", "v1", rsc("pods", "exec", "log", "status"), rsc("configmaps")))
	return discovery.Build("large-1", time.Now(), []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "a", Ready: true}, API: core, APIs: doc("a", groups[:len(groups)*9/10]...)},
		{Upstream: discovery.Upstream{Name: "b", Ready: true}, API: core, APIs: doc("b", groups...)},
	})
}

// junkAccept is a valid Accept header made distinct by a clause nobody serves: it negotiates exactly
// what base does.
func junkAccept(base string, i int) string { return base + ", text/x-junk-" + strconv.Itoa(i) }

// TestDiscoveryCacheKeyedOnNegotiatedResult: 10 000 distinct Accept headers that negotiate the same
// representations add no entries beyond those representations, and get the same bytes as the plain
// header. (Keyed on the raw header, the cache took one full document per header.)
func TestDiscoveryCacheKeyedOnNegotiatedResult(t *testing.T) {
	f := newFrontDiscovery(skewedTopology())
	bases := []string{acceptV2, acceptV2beta1, acceptV2Proto, "application/json", "application/yaml", protobufType}
	paths := []string{"/apis", "/api", "/apis/apps/v1", "/api/v1", "/apis/apps"}
	want := map[string][]byte{}
	for _, p := range paths {
		for _, b := range bases {
			r := f.serve("GET", p, b, "")
			if r == nil {
				t.Fatalf("%s %s: not answered", p, b)
			}
			want[p+"\x00"+b] = r.GetImmediateResponse().GetBody()
		}
	}
	f.mu.Lock()
	variants := len(f.cache)
	f.mu.Unlock()
	// Six headers per path, at most six representations per path (fewer where two headers negotiate
	// the same one, or both nothing).
	if variants == 0 || variants > len(paths)*len(bases) {
		t.Fatalf("%d cache entries for %d paths", variants, len(paths))
	}
	for i := range 10_000 {
		p, b := paths[i%len(paths)], bases[i%len(bases)]
		r := f.serve("GET", p, junkAccept(b, i), "")
		if got := r.GetImmediateResponse().GetBody(); !bytes.Equal(got, want[p+"\x00"+b]) {
			t.Fatalf("%s with %q: %d bytes, differs from the %d bytes for %q", p, junkAccept(b, i), len(got), len(want[p+"\x00"+b]), b)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cache) != variants {
		t.Errorf("10 000 distinct Accept headers grew the cache from %d to %d entries", variants, len(f.cache))
	}
}

// TestDiscoveryCacheUnacceptableIsOneEntry: headers that offer nothing acceptable share the 406.
func TestDiscoveryCacheUnacceptableIsOneEntry(t *testing.T) {
	f := newFrontDiscovery(skewedTopology())
	for i := range 1000 {
		r := f.serve("GET", "/apis/apps/v1", "text/x-junk-"+strconv.Itoa(i), "")
		if code := r.GetImmediateResponse().GetStatus().GetCode(); code != 406 {
			t.Fatalf("status %d, want 406", code)
		}
	}
	if len(f.cache) != 1 {
		t.Errorf("%d cache entries for 1000 unacceptable headers, want 1", len(f.cache))
	}
}

// TestDiscoveryCacheBoundsBytes: past the byte budget answers are still served, just not kept.
func TestDiscoveryCacheBoundsBytes(t *testing.T) {
	f := newFrontDiscovery(largeTopology(300))
	first := f.serve("GET", "/apis", acceptV2, "")
	size := len(first.GetImmediateResponse().GetBody())
	f.mu.Lock()
	f.cache, f.cacheBytes, f.maxBytes = map[cacheKey]*cachedResponse{}, 0, size*3/2+1024
	f.mu.Unlock()
	for _, a := range []string{acceptV2, acceptV2Proto, acceptV2 + ";pretty=1", "application/json"} {
		if r := f.serve("GET", "/apis", a, ""); r.GetImmediateResponse().GetStatus().GetCode() != 200 {
			t.Fatalf("%s: %v", a, r)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cacheBytes > f.maxBytes {
		t.Errorf("cache holds %d bytes, budget %d", f.cacheBytes, f.maxBytes)
	}
	if len(f.cache) == 0 || len(f.cache) == 4 {
		t.Errorf("%d entries: want some but not all four answers cached under a %d byte budget", len(f.cache), f.maxBytes)
	}
}

// BenchmarkDiscoveryDistinctAccept: memory kept after 10 000 distinct Accept headers against a
// Topology of 300 resources, and the cost per request.
func BenchmarkDiscoveryDistinctAccept(b *testing.B) {
	top := largeTopology(300)
	b.ReportAllocs()
	var kept uint64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f := newFrontDiscovery(top)
		for i := range 10_000 {
			f.serve("GET", "/apis", junkAccept(acceptV2, i), "")
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(f)
		kept = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
	}
	b.ReportMetric(float64(kept)/(1<<20), "MiB-kept")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10_000), "ns/request")
}
