package openapi

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/munnerz/goautoneg"
)

// The front's OpenAPI v3 answers, written exactly as an apiserver writes its own: kube-openapi's
// handler3 (pkg/handler3/handler.go, HandleDiscovery and HandleGroupVersion; byte-identical in the
// kube-openapi revisions of Kubernetes 1.35 and 1.36) behind k8s.io/apiserver's WithCacheControl
// filter (pkg/endpoints/filters/cachecontrol.go: "Cache-Control: no-cache, private" unless the handler
// sets its own). Status, headers and the conditional requests (If-None-Match, If-Modified-Since,
// If-Match, Range) are net/http's http.ServeContent itself, not a copy of it; but for one deliberate
// difference: a Range of several ranges is answered whole (Request.httpRequest).

// Media types handler3 serves a document in. Both protobuf spellings answer the first.
const (
	mediaJSON               = "json"
	mediaProtobuf           = "com.github.proto-openapi.spec.v3.v1.0+protobuf"
	mediaProtobufDeprecated = "com.github.proto-openapi.spec.v3@v1.0+protobuf"
	// ProtobufContentType is the Content-Type of a document's protobuf form.
	ProtobufContentType = "application/" + mediaProtobuf
	jsonContentType     = "application/json"
)

var accepted = []struct{ subType, contentType string }{
	{mediaJSON, jsonContentType},
	{mediaProtobuf, ProtobufContentType},
	{mediaProtobufDeprecated, ProtobufContentType},
}

// Negotiate is handler3's negotiation: an empty Accept is "*/*"; the first clause of goautoneg's
// order (q, then specificity) that one of the accepted types matches, type and subtype each equal
// or "*", picks it. ok false: nothing acceptable (handler3's 406, or its empty answer when Accept
// parses to no clause at all), which the front leaves to the apiserver. protobuf: the protobuf form.
func Negotiate(accept string) (contentType string, protobuf, ok bool) {
	if accept == "" {
		accept = "*/*"
	}
	for _, c := range goautoneg.ParseAccept(accept) {
		for _, a := range accepted {
			if (c.Type == "application" || c.Type == "*") && (c.SubType == a.subType || c.SubType == "*") {
				return a.contentType, a.subType != mediaJSON, true
			}
		}
	}
	return "", false, false
}

// Request is what an OpenAPI answer depends on in a request.
type Request struct {
	Query                                      string // raw query
	Accept                                     string
	IfNoneMatch, IfModifiedSince               string
	IfMatch, IfUnmodifiedSince, Range, IfRange string
}

// httpRequest is the request http.ServeContent answers. A Range naming more than one range (any
// comma) is dropped with its If-Range, so the answer is the whole document (200), as RFC 9110
// section 14.2 lets any server answer any Range: http.ServeContent would write a multipart body of
// every range, each part with its own headers, which for the thousands of one-byte ranges Envoy's
// 60 KiB request header limit allows costs hundreds of times a plain answer. One range costs no
// more than the plain answer (a slice of the document), so it gets handler3's 206 or 416.
func (q *Request) httpRequest(p string) *http.Request {
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: p, RawQuery: q.Query}, Header: http.Header{}}
	rang, ifRang := q.Range, q.IfRange
	if strings.Contains(rang, ",") {
		rang, ifRang = "", ""
	}
	for _, h := range [...]struct{ k, v string }{
		{"Accept", q.Accept}, {"If-None-Match", q.IfNoneMatch}, {"If-Modified-Since", q.IfModifiedSince},
		{"If-Match", q.IfMatch}, {"If-Unmodified-Since", q.IfUnmodifiedSince}, {"Range", rang}, {"If-Range", ifRang},
	} {
		if h.v != "" {
			r.Header[h.k] = []string{h.v}
		}
	}
	return r
}

// ServeIndex answers GET /openapi/v3 with the front's index, as handler3's HandleDiscovery writes it,
// into w (a Recorder).
//
// An apiserver's /openapi/v3 is not handler3's but kube-aggregator's handleDiscovery
// (pkg/controllers/openapiv3/aggregator/aggregator.go): no Etag, Last-Modified the time of the
// answer (http.ServeContent with time.Now()). A client caching that answer (fetched while the front
// passed /openapi/v3 through: ext_proc failing open, or a Topology without an index) can only
// revalidate it with If-Modified-Since; the front must never confirm it, since its index names
// other hashes. So the front's Last-Modified is the time of its answer too, and If-Modified-Since
// is not read at all (with the time alone a revalidation within the same second would still be
// confirmed): a copy of the front's own index always carries its Etag, and a client holding it
// revalidates with If-None-Match, which http.ServeContent checks first and still answers 304.
// Nothing of this answer is cached, so the time is never frozen.
func (f *Front) ServeIndex(w *Recorder, spec *Spec, q *Request) {
	w.reset(spec.JSON)
	withCacheControl(w)
	w.Header().Set("Etag", strconv.Quote(spec.Hash))
	w.Header().Set("Content-Type", jsonContentType)
	r := q.httpRequest(Prefix)
	r.Header.Del("If-Modified-Since")
	http.ServeContent(w, r, Prefix, f.clock.Now(), w.reader)
}

// ServeDocument answers GET /openapi/v3/<key> with the merged document spec, as handler3's
// HandleGroupVersion does, into w; rendered is its protobuf form if already rendered (nil: rendered
// now if negotiated). false: the apiserver's own answer is the same (nothing acceptable, or the
// rendering failed: handler3 writes nothing either), nothing is written.
func (f *Front) ServeDocument(w *Recorder, key string, spec *Spec, q *Request, rendered []byte) bool {
	contentType, protobuf, ok := Negotiate(q.Accept)
	if !ok {
		return false
	}
	data := spec.JSON
	if protobuf {
		data = rendered
		if data == nil {
			var err error
			if data, err = f.Protobuf(spec); err != nil {
				return false
			}
		}
	}
	w.reset(data)
	withCacheControl(w)
	r := q.httpRequest(Prefix + "/" + key)
	w.Header().Add("Vary", "Accept")
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Etag", strconv.Quote(spec.Hash))
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != spec.Hash {
			http.Redirect(w, r, DocumentURL(key, spec.Hash), http.StatusMovedPermanently)
			return true
		}
		w.Header().Set("Vary", "Accept")
		w.Header().Set("Cache-Control", "public, immutable")
		// handler3 formats the apiserver's local time; the front says UTC, which is what the
		// apiservers print in a container and what client-go's httpcache parses (time.RFC1123).
		w.Header().Set("Expires", f.clock.Now().UTC().AddDate(1, 0, 0).Format(time.RFC1123))
	}
	http.ServeContent(w, r, "", spec.Built, w.reader)
	return true
}

// withCacheControl is k8s.io/apiserver's WithCacheControl filter (pkg/endpoints/filters), which
// wraps every apiserver handler: "no-cache, private" unless the handler sets its own.
func withCacheControl(w http.ResponseWriter) {
	if _, ok := w.Header()["Cache-Control"]; !ok {
		w.Header().Set("Cache-Control", "no-cache, private")
	}
}

// Recorder is the http.ResponseWriter an answer is written into. http.ServeContent copies the
// document with io.CopyN from the reader it was given; the recorder takes that as a slice of the
// document instead of copying it (ReadFrom), so a large document costs no copy per request.
type Recorder struct {
	header http.Header
	status int
	data   []byte
	reader *bytes.Reader
	body   []byte
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{header: http.Header{}} }

func (w *Recorder) reset(data []byte) { w.data, w.reader = data, bytes.NewReader(data) }

// Header is the answer's header.
func (w *Recorder) Header() http.Header { return w.header }

// WriteHeader records the status, once.
func (w *Recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// Write appends to the body.
func (w *Recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// ReadFrom takes a read of the document's own reader as a slice of the document; anything else
// (a multipart range answer) is copied.
func (w *Recorder) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok && w.reader != nil && lr.R == w.reader && w.body == nil {
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

// Status is the recorded status (200 if none was written).
func (w *Recorder) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Body is the recorded body (a slice of the document when it was served whole or in one range).
func (w *Recorder) Body() []byte { return w.body }
