package discovery

import (
	"bytes"
	"context"
	"crypto/sha512"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/skewgate/skewgate/internal/openapitest"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/openapi"
)

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
		docs[k] = openapitest.File(t, version, capturedKeys[k])
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
		if !errors.Is(err, openapi.ErrOverBudget) {
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
		up.index = append([]byte(`{"paths":{}}`), bytes.Repeat([]byte(" "), openapi.MaxIndexBytes)...)
		up.mu.Unlock()
		defer func() { up.mu.Lock(); up.index = nil; up.mu.Unlock() }()
		if _, err := f.openAPIIndex(ctx, idx); errorType(err) != ErrTooLarge {
			t.Errorf("err = %v, want %s", err, ErrTooLarge)
		}
	})
}
