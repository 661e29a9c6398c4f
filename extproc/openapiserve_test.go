package extproc

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"github.com/skewgate/skewgate/internal/openapitest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"

	"github.com/skewgate/skewgate/openapi"
)

// specOf is a served document as the Topology holds one: its hash is handler3's computeETag.
func specOf(data []byte, built time.Time) *discovery.OpenAPISpec {
	return &discovery.OpenAPISpec{JSON: data, Hash: fmt.Sprintf("%X", sha512.Sum512(data)), Built: built}
}

// handler3Server serves a document under key through kube-openapi's own handler3, behind the
// apiserver's cache-control filter, as an apiserver does. It returns the server and the hash
// handler3 publishes (it re-marshals the spec, so its bytes and hash differ from ours).
func handler3Server(t testing.TB, key string, data []byte) (*httptest.Server, string) {
	t.Helper()
	var sp spec3.OpenAPI
	if err := json.Unmarshal(data, &sp); err != nil {
		t.Fatal(err)
	}
	svc := handler3.NewOpenAPIService()
	svc.UpdateGroupVersion(key, &sp)
	mux := http.NewServeMux()
	mux.HandleFunc("/openapi/v3", svc.HandleDiscovery)
	mux.HandleFunc("/openapi/v3/", svc.HandleGroupVersion)
	srv := httptest.NewServer(withCacheControlFilter(mux))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/openapi/v3")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var idx handler3.OpenAPIV3Discovery
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
		t.Fatal(err)
	}
	u := idx.Paths[key].ServerRelativeURL
	_, h, ok := strings.Cut(u, "?hash=")
	if !ok {
		t.Fatalf("handler3's index: %q", u)
	}
	return srv, h
}

// withCacheControlFilter is k8s.io/apiserver's WithCacheControl (pkg/endpoints/filters/
// cachecontrol.go), copied rather than imported to keep that package's dependencies out of the
// module; TestOpenAPIAnswersLikeTheTestbed checks the result against a real apiserver's headers.
func withCacheControlFilter(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.Header()["Cache-Control"]; !ok {
			w.Header().Set("Cache-Control", "no-cache, private")
		}
		h.ServeHTTP(w, r)
	})
}

// observed is one answer, reduced to what the two sides must agree on.
type observed struct {
	status                                   int
	contentType, vary, cacheControl, accRang string
	etag, lastModified, expires, location    string
	body                                     []byte
}

func fromHTTP(t testing.TB, resp *http.Response) observed {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	return observed{status: resp.StatusCode, contentType: h.Get("Content-Type"), vary: strings.Join(h.Values("Vary"), ","),
		cacheControl: h.Get("Cache-Control"), accRang: h.Get("Accept-Ranges"), etag: h.Get("Etag"), lastModified: h.Get("Last-Modified"),
		expires: h.Get("Expires"), location: h.Get("Location"), body: b}
}

func fromImmediate(t testing.TB, resp *extprocv3.ProcessingResponse) observed {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("not an immediate response: %v", resp)
	}
	h := http.Header{}
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		if o.GetAppend().GetValue() {
			h.Add(o.Header.Key, string(o.Header.RawValue))
		} else {
			h.Set(o.Header.Key, string(o.Header.RawValue))
		}
	}
	if h.Get("Content-Length") != "" {
		t.Errorf("the front sets Content-Length itself (Envoy sets it for a local reply)")
	}
	return observed{status: int(ir.Status.Code), contentType: h.Get("Content-Type"), vary: strings.Join(h.Values("Vary"), ","),
		cacheControl: h.Get("Cache-Control"), accRang: h.Get("Accept-Ranges"), etag: h.Get("Etag"), lastModified: h.Get("Last-Modified"),
		expires: h.Get("Expires"), location: h.Get("Location"), body: ir.Body}
}

var quotedHash = regexp.MustCompile(`^"[0-9A-F]{128}"$`)

// compareOpenAPI holds the front's answer equal to handler3's, each side with its own hash and time.
func compareOpenAPI(t *testing.T, name string, front, ref observed, frontHash, refHash, key string, frontBody []byte) {
	t.Helper()
	for _, o := range []*observed{&front, &ref} { // a multipart answer's boundary is random
		if ct, _, ok := strings.Cut(o.contentType, "; boundary="); ok {
			o.contentType = ct
		}
	}
	if front.status != ref.status || front.contentType != ref.contentType || front.vary != ref.vary ||
		front.cacheControl != ref.cacheControl || front.accRang != ref.accRang {
		t.Errorf("%s: front %d ct=%q vary=%q cc=%q ar=%q, handler3 %d ct=%q vary=%q cc=%q ar=%q", name,
			front.status, front.contentType, front.vary, front.cacheControl, front.accRang,
			ref.status, ref.contentType, ref.vary, ref.cacheControl, ref.accRang)
	}
	for _, side := range []struct {
		name string
		o    observed
		hash string
	}{{"front", front, frontHash}, {"handler3", ref, refHash}} {
		if side.o.etag != "" && (!quotedHash.MatchString(side.o.etag) || side.o.etag != strconv.Quote(side.hash)) {
			t.Errorf("%s: %s Etag %q, want its own hash", name, side.name, side.o.etag)
		}
		if side.o.location != "" && side.o.location != "/openapi/v3/"+key+"?hash="+side.hash {
			t.Errorf("%s: %s Location %q", name, side.name, side.o.location)
		}
		if side.o.lastModified != "" {
			if _, err := time.Parse(http.TimeFormat, side.o.lastModified); err != nil {
				t.Errorf("%s: %s Last-Modified %q: %v", name, side.name, side.o.lastModified, err)
			}
		}
		if side.o.expires != "" {
			e, err := time.Parse(time.RFC1123, side.o.expires)
			if d := time.Until(e); err != nil || d < 364*24*time.Hour || d > 367*24*time.Hour {
				t.Errorf("%s: %s Expires %q (%v), want a year from now in time.RFC1123", name, side.name, side.o.expires, err)
			}
		}
	}
	if (front.etag == "") != (ref.etag == "") || (front.location == "") != (ref.location == "") ||
		(front.lastModified == "") != (ref.lastModified == "") || (front.expires == "") != (ref.expires == "") {
		t.Errorf("%s: headers present: front etag=%q loc=%q lm=%q exp=%q, handler3 etag=%q loc=%q lm=%q exp=%q", name,
			front.etag, front.location, front.lastModified, front.expires, ref.etag, ref.location, ref.lastModified, ref.expires)
	}
	if (len(front.body) == 0) != (len(ref.body) == 0) {
		t.Errorf("%s: front body %d bytes, handler3 %d", name, len(front.body), len(ref.body))
	}
	if front.status == http.StatusOK && front.contentType == "application/json" && !bytes.Equal(front.body, frontBody) {
		t.Errorf("%s: the front's 200 is not its document", name)
	}
}

const acceptProto = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"

// TestOpenAPIDocumentLikeHandler3 serves documents through the front and through kube-openapi's
// handler3 (its spec decoded from the same JSON) for a matrix of Accept, ?hash= and conditional
// headers, and holds every answer equal: a captured document, and the document the front merges from
// the captured v1.35.4 and v1.36.3 admissionregistration.k8s.io/v1.
func TestOpenAPIDocumentLikeHandler3(t *testing.T) {
	t.Run("captured", func(t *testing.T) {
		data := openapitest.Doc(t, "v1.36.3", "apis/apps/v1")
		differential(t, "apis/apps/v1", specOf(data, time.Now().Add(-time.Hour).Truncate(time.Second)))
	})
	t.Run("merged", func(t *testing.T) {
		top := discovery.Build("served", time.Now(), servedFacts(t))
		spec := top.OpenAPIMerged(keyAdmission)
		if spec == nil {
			t.Fatalf("nothing merged: %+v", top.DecideOpenAPI(keyAdmission))
		}
		differential(t, keyAdmission, spec)
	})
}

func differential(t *testing.T, key string, spec *discovery.OpenAPISpec) {
	data := spec.JSON
	srv, refHash := handler3Server(t, key, data)
	f := newFrontOpenAPI(nil, nil, openapi.FrontConfig{})

	accepts := []string{"", "application/json", "*/*", "application/*", acceptProto,
		"application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
		"application/json;q=0.5, " + acceptProto, "application/json, " + acceptProto + ";q=0.9",
		"text/html", "text/html, */*;q=0.1", "application/yaml", "application/json;q=0"}
	hashes := []string{"none", "own", "wrong"}
	conds := []struct{ ifNoneMatch, ifModifiedSince, ifMatch, rang string }{
		{}, {ifNoneMatch: "own"}, {ifNoneMatch: `"x", own`}, {ifNoneMatch: "*"}, {ifNoneMatch: "W/own"},
		{ifNoneMatch: `"other"`}, {ifModifiedSince: "own"}, {ifModifiedSince: "past"}, {ifNoneMatch: `"other"`, ifModifiedSince: "own"},
		{ifMatch: "own"}, {ifMatch: `"other"`}, {rang: "bytes=0-9"}, {rang: "bytes=-5"}, {rang: "bytes=5-"}, {rang: "bytes=99999999-"},
		{rang: "bytes=0-9", ifNoneMatch: "own"}, {rang: "bytes=0-9", ifMatch: `"other"`},
		// Several ranges: the front answers as handler3 answers without the Range (docs/openapi.md).
		{rang: "bytes=0-1,5-6"}, {rang: "bytes=0-9,"}, {rang: "bytes=99999999-,0-0"}, {rang: manyRanges(1000)},
		{rang: "bytes=0-1,5-6", ifNoneMatch: "own"},
	}
	// handler3's Last-Modified is when it first rendered the document: read it once.
	first, err := http.Get(srv.URL + "/openapi/v3/" + key)
	if err != nil {
		t.Fatal(err)
	}
	refLM := fromHTTP(t, first).lastModified
	n, differ := 0, 0
	for _, accept := range accepts {
		for _, hash := range hashes {
			for _, c := range conds {
				n++
				name := fmt.Sprintf("accept=%q hash=%s inm=%q ims=%q im=%q range=%.40q", accept, hash, c.ifNoneMatch, c.ifModifiedSince, c.ifMatch, c.rang)
				several := strings.Contains(c.rang, ",")
				side := func(h, lm string) (query string, hdr http.Header) {
					hdr = http.Header{}
					switch hash {
					case "own":
						query = "hash=" + h
					case "wrong":
						query = "hash=ABC"
					}
					if accept != "" {
						hdr.Set("Accept", accept)
					}
					if c.ifNoneMatch != "" {
						hdr.Set("If-None-Match", strings.ReplaceAll(c.ifNoneMatch, "own", strconv.Quote(h)))
					}
					switch c.ifModifiedSince {
					case "own":
						hdr.Set("If-Modified-Since", lm)
					case "past":
						hdr.Set("If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT")
					}
					if c.ifMatch != "" {
						hdr.Set("If-Match", strings.ReplaceAll(c.ifMatch, "own", strconv.Quote(h)))
					}
					if c.rang != "" {
						hdr.Set("Range", c.rang)
					}
					return query, hdr
				}
				query, hdr := side(refHash, refLM)
				ask := func(hdr http.Header) observed {
					req, _ := http.NewRequest(http.MethodGet, srv.URL+"/openapi/v3/"+key+"?"+query, nil)
					req.Header = hdr
					rr, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
					if err != nil {
						t.Fatal(err)
					}
					return fromHTTP(t, rr)
				}
				ref := ask(hdr)
				if several {
					// The deliberate difference: handler3 (http.ServeContent) answers several
					// ranges with a multipart body when they add up to no more than the document;
					// the front answers what handler3 answers without the Range.
					if strings.HasPrefix(ref.contentType, "multipart/byteranges") {
						differ++
					}
					hdr.Del("Range")
					ref = ask(hdr)
				}

				query, hdr = side(spec.Hash, spec.Built.UTC().Format(http.TimeFormat))
				q := &openAPIRequest{query: query, accept: hdr.Get("Accept"), ifNoneMatch: hdr.Get("If-None-Match"), ifModifiedSince: hdr.Get("If-Modified-Since"),
					ifMatch: hdr.Get("If-Match"), rang: hdr.Get("Range")}
				resp := f.document(key, spec, q)
				if resp == nil {
					// The front leaves it to the apiserver: only where handler3 finds nothing acceptable.
					if ref.status != http.StatusNotAcceptable {
						t.Errorf("%s: the front passes, handler3 answers %d", name, ref.status)
					}
					continue
				}
				front := fromImmediate(t, resp)
				compareOpenAPI(t, name, front, ref, spec.Hash, refHash, key, data)
				if front.status == http.StatusPartialContent && c.rang == "bytes=0-9" && front.contentType == "application/json" && string(front.body) != string(data[:10]) {
					t.Errorf("%s: range answered %q", name, front.body)
				}
				if several && front.status == http.StatusOK && front.contentType == "application/json" && !bytes.Equal(front.body, data) {
					t.Errorf("%s: several ranges answered %d bytes, want the whole document", name, len(front.body))
				}
				if front.status == http.StatusOK && front.contentType == acceptProto {
					var d openapi_v3.Document
					if err := proto.Unmarshal(front.body, &d); err != nil || len(d.GetPaths().GetPath()) == 0 {
						t.Errorf("%s: protobuf body: %v, %d paths", name, err, len(d.GetPaths().GetPath()))
					}
				}
			}
		}
	}
	t.Logf("%d requests compared; %d with several ranges handler3 answers multipart, the front whole", n, differ)
	if differ == 0 {
		t.Errorf("no request with several ranges got handler3's multipart answer: the difference is not exercised")
	}
}

// TestOpenAPIIndexLikeHandler3: the front's index is answered as handler3's HandleDiscovery answers.
func TestOpenAPIIndexLikeHandler3(t *testing.T) {
	srv, _ := handler3Server(t, "apis/apps/v1", openapitest.Doc(t, "v1.36.3", "apis/apps/v1"))
	first, err := http.Get(srv.URL + "/openapi/v3")
	if err != nil {
		t.Fatal(err)
	}
	refDoc := fromHTTP(t, first)
	refHash, _ := strconv.Unquote(refDoc.etag)
	idx := specOf([]byte(`{"paths":{"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=AB"}}}`), time.Now().Add(-time.Minute).Truncate(time.Second))
	f := newFrontOpenAPI(nil, nil, openapi.FrontConfig{})
	for _, c := range []struct{ ifNoneMatch, ifModifiedSince, rang string }{{}, {ifNoneMatch: "own"}, {ifNoneMatch: `"x"`}, {ifModifiedSince: "own"}, {ifNoneMatch: "*"},
		{rang: "bytes=0-9"}, {rang: "bytes=99999999-"}, {rang: "bytes=0-9", ifNoneMatch: "own"},
		// Several ranges: answered as handler3 answers without the Range (docs/openapi.md).
		{rang: "bytes=0-1,5-6"}, {rang: manyRanges(30)}} {
		name := fmt.Sprintf("inm=%q ims=%q range=%.40q", c.ifNoneMatch, c.ifModifiedSince, c.rang)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/openapi/v3", nil)
		q := &openAPIRequest{rang: c.rang}
		if c.rang != "" && !strings.Contains(c.rang, ",") {
			req.Header.Set("Range", c.rang)
		}
		if c.ifNoneMatch != "" {
			req.Header.Set("If-None-Match", strings.ReplaceAll(c.ifNoneMatch, "own", refDoc.etag))
			q.ifNoneMatch = strings.ReplaceAll(c.ifNoneMatch, "own", strconv.Quote(idx.Hash))
		}
		if c.ifModifiedSince != "" {
			// An apiserver's index is kube-aggregator's, whose Last-Modified is the time of each
			// answer, so an If-Modified-Since of an earlier answer gets 200: handler3 is asked with
			// a time before its own Last-Modified to answer as the aggregator does. The front gets
			// its own Topology's build time and must answer 200 too (openapiserve.go, index).
			req.Header.Set("If-Modified-Since", time.Unix(0, 0).UTC().Format(http.TimeFormat))
			q.ifModifiedSince = idx.Built.UTC().Format(http.TimeFormat)
		}
		rr, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		compareOpenAPI(t, name, fromImmediate(t, f.index(idx, q)), fromHTTP(t, rr), idx.Hash, refHash, "", idx.JSON)
	}
}

// TestOpenAPIAnswersLikeTheTestbed holds the front's answers for a captured document against the
// response headers the testbed's v1.36.3 apiserver sent for the same requests
// (discovery/testdata/openapi/headers.txt): the same status and the same headers, with the same
// values but for the times. The captured bytes are the apiserver's, so even the hash is the same.
func TestOpenAPIAnswersLikeTheTestbed(t *testing.T) {
	const key = "apis/apps/v1"
	spec := specOf(openapitest.Doc(t, "v1.36.3", key), time.Now().Truncate(time.Second))
	raw, err := os.ReadFile(filepath.Join("..", "discovery", "testdata", "openapi", "headers.txt"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFrontOpenAPI(nil, nil, openapi.FrontConfig{})
	checked := 0
	for _, sec := range strings.Split(string(raw), "### ")[1:] {
		lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(sec, "\r", "")), "\n") // curl -i keeps the CRs
		req := strings.Fields(lines[0])                                                    // GET <path> [header: value | (comment)]
		p := req[1]
		k, query, index, ok := decision.OpenAPIPath(p)
		if !ok || index || k != key {
			continue // the index and other paths: not answered like this apiserver (see openapi.go)
		}
		q := &openAPIRequest{query: query}
		if len(req) > 3 && strings.HasSuffix(req[2], ":") {
			switch strings.ToLower(strings.TrimSuffix(req[2], ":")) {
			case "accept":
				q.accept = req[3]
			case "if-none-match":
				q.ifNoneMatch = req[3]
			}
		}
		code, _ := strconv.Atoi(strings.Fields(lines[1])[1])
		want := http.Header{}
		for _, l := range lines[2:] {
			if k, v, ok := strings.Cut(l, ": "); ok && k != "content-length" {
				want.Add(k, v)
			}
		}
		resp := f.document(key, spec, q)
		if code == http.StatusNotAcceptable {
			if resp != nil {
				t.Errorf("%s: the front answers %v, the apiserver 406", lines[0], resp)
			}
			checked++
			continue
		}
		ir := resp.GetImmediateResponse()
		if ir == nil || int(ir.Status.Code) != code {
			t.Errorf("%s: front %v, apiserver %d", lines[0], resp, code)
			continue
		}
		got := http.Header{}
		for _, o := range ir.GetHeaders().GetSetHeaders() {
			got.Add(o.Header.Key, string(o.Header.RawValue))
		}
		for _, h := range []http.Header{got, want} {
			for _, k := range []string{"Last-Modified", "Expires"} {
				if v := h.Get(k); v != "" {
					h.Set(k, "<time>")
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n front     %v\n apiserver %v", lines[0], got, want)
		}
		checked++
	}
	if checked != 6 {
		t.Errorf("checked %d captured answers, want 6", checked)
	}
}
