package discovery

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// captured reads a gzipped document captured from a testbed apiserver (testdata/openapi/README.md).
func captured(t testing.TB, version, name string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "openapi", version, name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// capturedDocs are the documents captured per version, by key.
var capturedKeys = map[string]string{
	"api/v1":                               "api_v1",
	"apis/apps/v1":                         "apis_apps_v1",
	"apis/admissionregistration.k8s.io/v1": "apis_admissionregistration.k8s.io_v1",
	"apis/stable.example.com/v1":           "apis_stable.example.com_v1",
	"version":                              "version",
}

func sha512Hex(b []byte) string {
	sum := sha512.Sum512(b)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

func TestParseOpenAPIIndexCaptured(t *testing.T) {
	for _, v := range []string{"v1.35.4", "v1.36.3"} {
		idx, err := ParseOpenAPIIndex(captured(t, v, "index"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if len(idx.Keys) != 48 || len(idx.Hash) != 64 {
			t.Errorf("%s: %d keys, hash %q; the captured index has 48 keys", v, len(idx.Keys), idx.Hash)
		}
		// Every captured document is the one its index names: its SHA-512 is the hash.
		for key, file := range capturedKeys {
			if got, want := idx.Keys[key], sha512Hex(captured(t, v, file)); got != want {
				t.Errorf("%s: index hash of %s = %.16s…, the captured document's SHA-512 is %.16s…", v, key, got, want)
			}
		}
		for _, key := range []string{".well-known/openid-configuration", "openid/v1/jwks", "apis/apps", "api"} {
			if _, ok := idx.Keys[key]; !ok {
				t.Errorf("%s: key %q missing", v, key)
			}
		}
	}
}

func TestParseOpenAPIIndexRejects(t *testing.T) {
	const h = "ABC123"
	entry := func(key, url string) string {
		return `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=` + h + `"},` +
			`"` + key + `":{"serverRelativeURL":"` + url + `"}}}`
	}
	ok := func(key string) string { return entry(key, "/openapi/v3/"+key+"?hash="+h) }
	var many strings.Builder
	many.WriteString(`{"paths":{`)
	for i := range maxOpenAPIKeys + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		k := "k" + strings.Repeat("x", i%7) + "/" + hex.EncodeToString([]byte{byte(i >> 8), byte(i)})
		many.WriteString(`"` + k + `":{"serverRelativeURL":"/openapi/v3/` + k + `?hash=1"}`)
	}
	many.WriteString(`}}`)
	cases := []struct {
		name, body, typ string
	}{
		{"not json", "<html>", ErrDecode},
		{"array", `[]`, ErrDecode},
		{"no paths", `{}`, ErrInvalid},
		{"another member", `{"paths":{},"x":1}`, ErrInvalid},
		{"paths not an object", `{"paths":[]}`, ErrInvalid},
		{"paths null", `{"paths":null}`, ErrInvalid},
		{"trailing garbage", ok("apis/apps/v1") + "x", ErrDecode},
		{"entry not an object", `{"paths":{"api/v1":"x"}}`, ErrInvalid},
		{"entry with another member", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=1","x":1}}}`, ErrInvalid},
		{"entry url not a string", `{"paths":{"api/v1":{"serverRelativeURL":1}}}`, ErrInvalid},
		{"leading slash", ok("/apis/apps/v1"), ErrInvalid},
		{"dot dot", ok("apis/../v1"), ErrInvalid},
		{"dot dot in a segment", ok("apis/a..b"), ErrInvalid},
		{"empty segment", ok("apis//v1"), ErrInvalid},
		{"trailing slash", ok("apis/apps/v1/"), ErrInvalid},
		{"bad byte", ok("apis/apps/v1?x"), ErrInvalid},
		{"percent", ok("apis/a%2Fb/v1"), ErrInvalid},
		{"space", ok("apis/a b/v1"), ErrInvalid},
		{"key too long", ok(strings.Repeat("a", 257)), ErrInvalid},
		{"group not DNS", ok("apis/Apps/v1"), ErrInvalid},
		{"group underscore", ok("apis/a_b/v1"), ErrInvalid},
		{"version not DNS-1035", ok("apis/apps/1v"), ErrInvalid},
		{"core version not DNS-1035", ok("api/V1"), ErrInvalid},
		{"url of another key", entry("apis/apps/v1", "/openapi/v3/apis/batch/v1?hash="+h), ErrInvalid},
		{"url absolute", entry("apis/apps/v1", "https://evil/openapi/v3/apis/apps/v1?hash="+h), ErrInvalid},
		{"url without hash", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1"), ErrInvalid},
		{"empty hash", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="), ErrInvalid},
		{"hash with other bytes", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash=AB&x=1"), ErrInvalid},
		{"hash too long", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="+strings.Repeat("A", 257)), ErrInvalid},
		{"too many keys", many.String(), ErrInvalid},
		{"too large", `{"paths":{}}` + strings.Repeat(" ", MaxOpenAPIIndexBytes), ErrTooLarge},
	}
	for _, tc := range cases {
		idx, err := ParseOpenAPIIndex([]byte(tc.body))
		if err == nil {
			t.Errorf("%s: accepted (%d keys)", tc.name, len(idx.Keys))
			continue
		}
		if got := errorType(err); got != tc.typ {
			t.Errorf("%s: error type %s (%v), want %s", tc.name, got, err, tc.typ)
		}
	}
	// The limits themselves are accepted.
	for _, body := range []string{ok("apis/apps/v1"), ok(strings.Repeat("a", 256)), `{"paths":{}}`,
		entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="+strings.Repeat("z", 256)), ok("apis/apps/v1/x"), ok("apis/apps")} {
		if _, err := ParseOpenAPIIndex([]byte(body)); err != nil {
			t.Errorf("%.80s: %v", body, err)
		}
	}
}

// openapiUpstream serves /openapi/v3 and its documents as an apiserver does (aggregator index with
// no ETag and text/plain; handler3 documents with ETag, 301 for a stale hash, 404 for an unknown
// key), and everything else as fakeUpstream.
type openapiUpstream struct {
	*fakeUpstream
	srv *httptest.Server

	mu        sync.Mutex
	index     []byte // nil: built from docs
	indexCode int    // answer for the index when not 0 or 200
	docs      map[string][]byte
	corrupt   map[string]bool // serve the document with one byte flipped under the right hash
	indexReqs atomic.Int64
	docReqs   map[string]int // by key
}

func newOpenAPIUpstream(t testing.TB, cert tls.Certificate, version string, apis *Document, docs map[string][]byte) *openapiUpstream {
	o := &openapiUpstream{fakeUpstream: &fakeUpstream{notMod: make(chan struct{}, 64)}, docs: docs,
		corrupt: map[string]bool{}, docReqs: map[string]int{}}
	o.fakeUpstream.set(version, docJSON(t, coreDoc()), docJSON(t, apis))
	o.srv = httptest.NewUnstartedServer(o)
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *openapiUpstream) addr() string { return o.srv.Listener.Addr().String() }

// capturedDocs returns the captured documents of version by key.
func capturedDocs(t testing.TB, version string, keys ...string) map[string][]byte {
	docs := map[string][]byte{}
	for _, k := range keys {
		docs[k] = captured(t, version, capturedKeys[k])
	}
	return docs
}

func (o *openapiUpstream) indexJSON() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.index != nil {
		return o.index
	}
	paths := map[string]map[string]string{}
	for k, d := range o.docs {
		paths[k] = map[string]string{"serverRelativeURL": "/openapi/v3/" + k + "?hash=" + sha512Hex(d)}
	}
	data, _ := json.Marshal(map[string]any{"paths": paths})
	return data
}

func (o *openapiUpstream) setDocs(docs map[string][]byte) {
	o.mu.Lock()
	o.docs = docs
	o.mu.Unlock()
}

func (o *openapiUpstream) requestsFor(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.docReqs[key]
}

func (o *openapiUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/openapi/v3") {
		o.fakeUpstream.ServeHTTP(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if r.URL.Path == "/openapi/v3" {
		o.indexReqs.Add(1)
		o.mu.Lock()
		code := o.indexCode
		o.mu.Unlock()
		if code != 0 && code != http.StatusOK {
			w.WriteHeader(code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8") // sniffed, as the aggregator's
		w.Write(o.indexJSON())
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/openapi/v3/")
	o.mu.Lock()
	o.docReqs[key]++
	body, ok := o.docs[key]
	corrupt := o.corrupt[key]
	o.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	h := sha512Hex(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Etag", `"`+h+`"`)
	w.Header().Add("Vary", "Accept")
	if q := r.URL.Query().Get("hash"); q != "" && q != h {
		http.Redirect(w, r, "/openapi/v3/"+key+"?hash="+h, http.StatusMovedPermanently)
		return
	}
	if corrupt {
		body = bytes.Clone(body)
		body[len(body)/2] ^= 1
	}
	w.Write(body)
}

func TestFetchOpenAPIDocuments(t *testing.T) {
	pki, cert := testPKI(t)
	docs := capturedDocs(t, "v1.36.3", "apis/apps/v1", "apis/admissionregistration.k8s.io/v1", "version")
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), docs)
	f, err := newFetcher(restFor(t, pki), up.addr(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	idx, err := f.openAPIIndex(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Keys) != 3 {
		t.Fatalf("index keys %v", idx.Keys)
	}
	if again, err := f.openAPIIndex(ctx, idx); err != nil || again != idx {
		t.Errorf("refetch of the same index: %p %v, want the previous one %p", again, err, idx)
	}
	apps := idx.Keys["apis/apps/v1"]

	t.Run("captured document", func(t *testing.T) {
		d, err := f.openAPIDoc(ctx, "apis/apps/v1", apps, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		if d.Hash != apps || !bytes.Equal(d.JSON, docs["apis/apps/v1"]) {
			t.Errorf("got %d bytes under %.16s…", len(d.JSON), d.Hash)
		}
	})
	t.Run("one byte flipped is refused", func(t *testing.T) {
		up.mu.Lock()
		up.corrupt["apis/apps/v1"] = true
		up.mu.Unlock()
		defer func() { up.mu.Lock(); delete(up.corrupt, "apis/apps/v1"); up.mu.Unlock() }()
		_, err := f.openAPIDoc(ctx, "apis/apps/v1", apps, 8<<20)
		if errorType(err) != ErrIntegrity {
			t.Fatalf("err = %v, want %s", err, ErrIntegrity)
		}
	})
	t.Run("a stale hash is a move, not followed", func(t *testing.T) {
		before := up.requestsFor("apis/apps/v1")
		stale := strings.Repeat("A", 128)
		_, err := f.openAPIDoc(ctx, "apis/apps/v1", stale, 8<<20)
		if errorType(err) != ErrMoved {
			t.Fatalf("err = %v, want %s", err, ErrMoved)
		}
		if n := up.requestsFor("apis/apps/v1") - before; n != 1 {
			t.Errorf("%d requests for one fetch: the redirect was followed", n)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		_, err := f.openAPIDoc(ctx, "apis/nope/v1", apps, 8<<20)
		if errorType(err) != ErrStatus {
			t.Fatalf("err = %v, want %s", err, ErrStatus)
		}
	})
	t.Run("larger than MaxDocumentBytes", func(t *testing.T) {
		small, _ := newFetcher(restFor(t, pki), up.addr(), 1000)
		_, err := small.openAPIDoc(ctx, "apis/apps/v1", apps, 8<<20)
		if errorType(err) != ErrTooLarge {
			t.Fatalf("err = %v, want %s", err, ErrTooLarge)
		}
	})
	t.Run("over the budget left", func(t *testing.T) {
		_, err := f.openAPIDoc(ctx, "apis/apps/v1", apps, int64(len(docs["apis/apps/v1"])-1))
		if !errors.Is(err, errOverBudget) {
			t.Fatalf("err = %v, want over budget", err)
		}
		if _, err := f.openAPIDoc(ctx, "apis/apps/v1", apps, int64(len(docs["apis/apps/v1"]))); err != nil {
			t.Fatalf("exactly the budget: %v", err)
		}
	})
	t.Run("not an OpenAPI document", func(t *testing.T) {
		for name, body := range map[string]string{
			"no components":   `{"openapi":"3.0.0","paths":{}}`,
			"openapi 2":       `{"openapi":"2.0","paths":{},"components":{}}`,
			"openapi number":  `{"openapi":3,"paths":{},"components":{}}`,
			"paths array":     `{"openapi":"3.0.0","paths":[],"components":{}}`,
			"wrong case":      `{"OpenAPI":"3.0.0","paths":{},"components":{}}`,
			"array":           `[]`,
			"trailing bytes":  `{"openapi":"3.0.0","paths":{},"components":{}}{}`,
			"components null": `{"openapi":"3.0.0","paths":{},"components":null}`,
		} {
			up.setDocs(map[string][]byte{"apis/x/v1": []byte(body)})
			_, err := f.openAPIDoc(ctx, "apis/x/v1", sha512Hex([]byte(body)), 8<<20)
			if typ := errorType(err); typ != ErrInvalid && typ != ErrDecode {
				t.Errorf("%s: err = %v, want invalid or decode", name, err)
			}
		}
		body := `{"openapi":"3.0.0","paths":{},"components":{}}`
		up.setDocs(map[string][]byte{"apis/x/v1": []byte(body)})
		if _, err := f.openAPIDoc(ctx, "apis/x/v1", sha512Hex([]byte(body)), 8<<20); err != nil {
			t.Errorf("minimal document: %v", err)
		}
		up.setDocs(docs)
	})
	t.Run("no OpenAPI v3 (404) is an empty index", func(t *testing.T) {
		up.mu.Lock()
		up.indexCode = http.StatusNotFound
		up.mu.Unlock()
		defer func() { up.mu.Lock(); up.indexCode = 0; up.mu.Unlock() }()
		empty, err := f.openAPIIndex(ctx, idx)
		if err != nil || empty == nil || len(empty.Keys) != 0 || empty.Hash != "" {
			t.Fatalf("index %+v, err %v; want empty", empty, err)
		}
		if again, _ := f.openAPIIndex(ctx, empty); again != empty {
			t.Error("a second 404 made a new index")
		}
		up.mu.Lock()
		up.indexCode = http.StatusServiceUnavailable
		up.mu.Unlock()
		if _, err := f.openAPIIndex(ctx, idx); errorType(err) != ErrStatus {
			t.Errorf("503: err = %v, want %s", err, ErrStatus)
		}
	})
	t.Run("index larger than 1 MiB", func(t *testing.T) {
		up.mu.Lock()
		up.index = append([]byte(`{"paths":{}}`), bytes.Repeat([]byte(" "), MaxOpenAPIIndexBytes)...)
		up.mu.Unlock()
		defer func() { up.mu.Lock(); up.index = nil; up.mu.Unlock() }()
		if _, err := f.openAPIIndex(ctx, idx); errorType(err) != ErrTooLarge {
			t.Errorf("err = %v, want %s", err, ErrTooLarge)
		}
	})
}
