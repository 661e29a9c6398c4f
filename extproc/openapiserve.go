package extproc

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/munnerz/goautoneg"

	"github.com/skewgate/skewgate/discovery"
)

// The front's OpenAPI v3 answers, written exactly as an apiserver writes its own: kube-openapi's
// handler3 (pkg/handler3/handler.go, HandleDiscovery and HandleGroupVersion; byte-identical in the
// kube-openapi revisions of Kubernetes 1.35 and 1.36) behind k8s.io/apiserver's WithCacheControl
// filter (pkg/endpoints/filters/cachecontrol.go: "Cache-Control: no-cache, private" unless the handler
// sets its own). The handler runs into a recorder and the recorded answer becomes an ImmediateResponse,
// so status, headers and the conditional requests (If-None-Match, If-Modified-Since, If-Match, Range)
// are net/http's http.ServeContent itself, not a copy of it; but for one deliberate difference: a
// Range of several ranges is answered whole (httpRequest). All of it runs only in the response phase,
// for a request an apiserver authorized (discoveryauth.go), within a serving slot (frontlimit.go).

// Media types handler3 serves a document in. Both protobuf spellings answer the first.
const (
	openAPIJSON                = "json"
	openAPIProtobuf            = "com.github.proto-openapi.spec.v3.v1.0+protobuf"
	openAPIProtobufDeprecated  = "com.github.proto-openapi.spec.v3@v1.0+protobuf"
	openAPIProtobufContentType = "application/" + openAPIProtobuf
)

var openAPIAccepted = []struct{ subType, contentType string }{
	{openAPIJSON, "application/json"},
	{openAPIProtobuf, openAPIProtobufContentType},
	{openAPIProtobufDeprecated, openAPIProtobufContentType},
}

// negotiateOpenAPI is handler3's negotiation: an empty Accept is "*/*"; the first clause of
// goautoneg's order (q, then specificity) that one of the accepted types matches, type and subtype
// each equal or "*", picks it. ok false: nothing acceptable (handler3's 406, or its empty answer when
// Accept parses to no clause at all), which the front leaves to the apiserver.
func negotiateOpenAPI(accept string) (subType, contentType string, ok bool) {
	if accept == "" {
		accept = "*/*"
	}
	for _, c := range goautoneg.ParseAccept(accept) {
		for _, a := range openAPIAccepted {
			if (c.Type == "application" || c.Type == "*") && (c.SubType == a.subType || c.SubType == "*") {
				return a.subType, a.contentType, true
			}
		}
	}
	return "", "", false
}

// openAPIRequest is what an OpenAPI answer depends on in a request.
type openAPIRequest struct {
	query                                    string // raw query
	accept                                   string
	ifNoneMatch, ifModifiedSince             string
	ifMatch, ifUnmodifiedSince, rang, ifRang string
}

// httpRequest is the request http.ServeContent answers. A Range naming more than one range (any
// comma) is dropped with its If-Range, so the answer is the whole document (200), as RFC 9110
// section 14.2 lets any server answer any Range: http.ServeContent would write a multipart body of
// every range, each part with its own headers, which for the thousands of one-byte ranges Envoy's
// 60 KiB request header limit allows costs hundreds of times a plain answer. One range costs no
// more than the plain answer (a slice of the document), so it gets handler3's 206 or 416.
func (q *openAPIRequest) httpRequest(p string) *http.Request {
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: p, RawQuery: q.query}, Header: http.Header{}}
	rang, ifRang := q.rang, q.ifRang
	if strings.Contains(rang, ",") {
		rang, ifRang = "", ""
	}
	for _, h := range [...]struct{ k, v string }{
		{"Accept", q.accept}, {"If-None-Match", q.ifNoneMatch}, {"If-Modified-Since", q.ifModifiedSince},
		{"If-Match", q.ifMatch}, {"If-Unmodified-Since", q.ifUnmodifiedSince}, {"Range", rang}, {"If-Range", ifRang},
	} {
		if h.v != "" {
			r.Header[h.k] = []string{h.v}
		}
	}
	return r
}

// index answers GET /openapi/v3 with the front's index, as handler3's HandleDiscovery writes it.
//
// An apiserver's /openapi/v3 is not handler3's but kube-aggregator's handleDiscovery
// (pkg/controllers/openapiv3/aggregator/aggregator.go): no Etag, Last-Modified the time of the
// answer (http.ServeContent with time.Now()). A client caching that answer (fetched while the front
// passed /openapi/v3 through: ext_proc failing open, or a Topology without an index) can only
// revalidate it with If-Modified-Since; the front must never confirm it, since its index names
// other hashes. So the front's Last-Modified is the time of its answer too, and If-Modified-Since
// is not read at all (with time.Now() alone a revalidation within the same second would still be
// confirmed): a copy of the front's own index always carries its Etag, and a client holding it
// revalidates with If-None-Match, which http.ServeContent checks first and still answers 304.
// Nothing of this answer is cached per Topology, so the time is never frozen.
func (f *frontOpenAPI) index(spec *discovery.OpenAPISpec, q *openAPIRequest) *extprocv3.ProcessingResponse {
	w := newDocRecorder(spec.JSON)
	withCacheControl(w)
	w.Header().Set("Etag", strconv.Quote(spec.Hash))
	w.Header().Set("Content-Type", "application/json")
	r := q.httpRequest(openAPIV3Path)
	r.Header.Del("If-Modified-Since")
	http.ServeContent(w, r, openAPIV3Path, time.Now(), w.reader)
	return w.response()
}

// document answers GET /openapi/v3/<key> with the merged document, as handler3's
// HandleGroupVersion does, or nil when the apiserver's own answer is the same (nothing acceptable).
func (f *frontOpenAPI) document(key string, spec *discovery.OpenAPISpec, q *openAPIRequest) *extprocv3.ProcessingResponse {
	return f.renderedDocument(key, spec, q, nil)
}

// renderedDocument is document with the protobuf form already rendered, if rendered is not nil.
func (f *frontOpenAPI) renderedDocument(key string, spec *discovery.OpenAPISpec, q *openAPIRequest, rendered []byte) *extprocv3.ProcessingResponse {
	subType, contentType, ok := negotiateOpenAPI(q.accept)
	if !ok {
		return nil
	}
	data := spec.JSON
	if subType != openAPIJSON {
		data = rendered
		if data == nil {
			var err error
			if data, err = f.protobuf(spec); err != nil {
				return nil // handler3 writes nothing either; the apiserver answers
			}
		}
	}
	w := newDocRecorder(data)
	withCacheControl(w)
	r := q.httpRequest(openAPIV3Path + "/" + key)
	w.Header().Add("Vary", "Accept")
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Etag", strconv.Quote(spec.Hash))
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != spec.Hash {
			http.Redirect(w, r, openAPIURL(key, spec.Hash), http.StatusMovedPermanently)
			return w.response()
		}
		w.Header().Set("Vary", "Accept")
		w.Header().Set("Cache-Control", "public, immutable")
		// handler3 formats the apiserver's local time; the front says UTC, which is what the
		// apiservers print in a container and what client-go's httpcache parses (time.RFC1123).
		w.Header().Set("Expires", time.Now().UTC().AddDate(1, 0, 0).Format(time.RFC1123))
	}
	http.ServeContent(w, r, "", spec.Built, w.reader)
	return w.response()
}

// openAPIURL is handler3's constructServerRelativeURL: the document's URL in the index.
func openAPIURL(key, hash string) string {
	u := url.URL{Path: path.Join(openAPIV3Path, key)}
	u.RawQuery = url.Values{"hash": []string{hash}}.Encode()
	return u.String()
}

// withCacheControl is k8s.io/apiserver's WithCacheControl filter (pkg/endpoints/filters), which
// wraps every apiserver handler: "no-cache, private" unless the handler sets its own.
func withCacheControl(w http.ResponseWriter) {
	if _, ok := w.Header()["Cache-Control"]; !ok {
		w.Header().Set("Cache-Control", "no-cache, private")
	}
}

// docRecorder is the http.ResponseWriter the answers are written into. http.ServeContent copies the
// document with io.CopyN from the reader it was given; the recorder takes that as a slice of the
// document instead of copying it (ReadFrom), so a large document costs no copy per request.
type docRecorder struct {
	header http.Header
	status int
	data   []byte
	reader *bytes.Reader
	body   []byte
}

func newDocRecorder(data []byte) *docRecorder {
	return &docRecorder{header: http.Header{}, data: data, reader: bytes.NewReader(data)}
}

func (w *docRecorder) Header() http.Header { return w.header }

func (w *docRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *docRecorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// ReadFrom takes a read of the document's own reader as a slice of the document; anything else
// (a multipart range answer) is copied.
func (w *docRecorder) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok && lr.R == w.reader && w.body == nil {
		off, _ := w.reader.Seek(0, io.SeekCurrent)
		n := min(lr.N, int64(len(w.data))-off)
		if n <= 0 {
			return 0, nil
		}
		w.WriteHeader(http.StatusOK)
		w.body = w.data[off : off+n : off+n]
		lr.N -= n
		_, err := w.reader.Seek(off+n, io.SeekStart)
		return n, err
	}
	var b bytes.Buffer
	n, err := b.ReadFrom(r)
	if n > 0 {
		w.Write(b.Bytes())
	}
	return n, err
}

// response is the recorded answer as an ImmediateResponse. Content-Length is left to Envoy, which
// sets it for the body of a local reply.
func (w *docRecorder) response() *extprocv3.ProcessingResponse {
	code := w.status
	if code == 0 {
		code = http.StatusOK
	}
	keys := slices.Sorted(maps.Keys(w.header))
	set := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, k := range keys {
		if k == "Content-Length" {
			continue
		}
		// The first value replaces (a client cannot have put one there: these are response
		// headers of a local reply), the others are appended.
		for i, v := range w.header[k] {
			set = append(set, setHeader(strings.ToLower(k), v, i > 0))
		}
	}
	return immediateResponse(code, set, w.body, "skewgate_openapi")
}
