package e2e

import (
	"bytes"
	"maps"
	"net/http"
	"slices"
	"testing"
)

// ownIndex is an apiserver's own /openapi/v3 index.
type ownIndex struct {
	name, url string
	idx       openapiIndex
}

// checkKeySet requires the front's index to hold exactly the keys the apiservers publish, all of
// them together (docs/openapi.md: every key any apiserver publishes).
func checkKeySet(t *testing.T, what string, idx openapiIndex, own []ownIndex) {
	t.Helper()
	want := map[string]bool{}
	for _, a := range own {
		for k := range a.idx.Paths {
			want[k] = true
		}
	}
	var missing, extra []string
	for k := range want {
		if _, ok := idx.Paths[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range idx.Paths {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		t.Errorf("%s: %d keys, the apiservers' union %d: missing %v, not published by any apiserver %v", what, len(idx.Paths), len(want), missing, extra)
	}
}

// checkDocuments reads every document idx names from the front, reads times each, and requires
// each read to answer 200 (never a redirect) with kube-openapi's headers for a document by its
// hash, and exactly the bytes of its hash: those of every apiserver whose own index names the same
// hash for the key (read from it directly), and, when the hash is a SHA-512 (kube-openapi's), bytes
// that hash to it. A document under a hash no apiserver publishes is one the front merged; it
// returns the reads, how many documents were merged, and how many reads were redirected (each an
// error too).
func checkDocuments(t *testing.T, c *http.Client, base, token string, idx openapiIndex, own []ownIndex, reads int) (served, merged, redirected int) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(idx.Paths)) {
		u := idx.Paths[k].URL
		want := hashOf(u)
		var wantBody []byte
		for _, a := range own {
			if a.idx.Paths[k].URL != u {
				continue
			}
			r, b := rawGet(t, c, a.url+u, token, "Accept", "application/json")
			if r.StatusCode != http.StatusOK {
				t.Fatalf("GET %s directly from the %s apiserver: %d", u, a.name, r.StatusCode)
			}
			if wantBody != nil && !bytes.Equal(b, wantBody) {
				t.Errorf("GET %s: two apiservers publish different bytes under one hash", u)
			}
			wantBody = b
		}
		if wantBody == nil {
			merged++
			if len(want) != 128 {
				t.Errorf("GET %s: a hash no apiserver publishes and not a SHA-512 (%d characters): nothing to check the bytes against", u, len(want))
			}
		}
		for range reads {
			r, b := rawGet(t, c, base+u, token, "Accept", "application/json")
			served++
			if r.StatusCode == http.StatusMovedPermanently {
				redirected++
			}
			switch {
			case r.StatusCode != http.StatusOK:
				t.Errorf("GET %s (from the front's index): %d, want 200 (Location %q)", k, r.StatusCode, r.Header.Get("Location"))
			case wantBody != nil && !bytes.Equal(b, wantBody):
				t.Errorf("GET %s: %d bytes (SHA-512 %.16s…), not the %d bytes the apiserver publishes under that hash (%.16s…)",
					k, len(b), sha512Hex(b), len(wantBody), sha512Hex(wantBody))
			case len(want) == 128 && sha512Hex(b) != want:
				t.Errorf("GET %s: the body's SHA-512 is %.16s…, the index named %.16s…", k, sha512Hex(b), want)
			case r.Header.Get("Etag") != `"`+want+`"`:
				t.Errorf("GET %s: Etag %q, want %q", k, r.Header.Get("Etag"), want)
			case r.Header.Get("Cache-Control") != "public, immutable" || r.Header.Get("Expires") == "":
				t.Errorf("GET %s by its hash: Cache-Control %q Expires %q, want public, immutable and a date a year on",
					k, r.Header.Get("Cache-Control"), r.Header.Get("Expires"))
			}
		}
	}
	return served, merged, redirected
}
