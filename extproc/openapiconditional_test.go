package extproc

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

// The front's OpenAPI answers to conditional requests and to headers sent twice.

// TestOpenAPIIndexIfModifiedSinceNeverConfirms: a client holds an apiserver's own index
// (kube-aggregator's: no Etag, Last-Modified the time it answered), fetched while the front passed
// /openapi/v3 through (ext_proc failing open, or a Topology without an index). It revalidates with
// If-Modified-Since only, as client-go's httpcache does for an answer with Last-Modified and no
// Etag. The front must answer its own index (200), never a 304 that would confirm the apiserver's
// index, whose hashes differ, whatever the time sent: before, at or after the Topology's build, in
// the same second as the answer, or in the future. Its own Etag still gets the 304.
func TestOpenAPIIndexIfModifiedSinceNeverConfirms(t *testing.T) {
	h := startServer(t)
	built := time.Now().Add(-time.Minute)
	top := discovery.Build("openapi-1", built, openAPIFacts())
	h.src.t.Store(top)
	idx := top.OpenAPIIndex()
	if idx == nil {
		t.Fatal("no front index")
	}
	etag := strconv.Quote(idx.Hash)
	for _, c := range []struct {
		name  string
		extra []string
		code  uint32
	}{
		{"ims the apiserver's answer, just now", []string{"if-modified-since", time.Now().UTC().Format(http.TimeFormat)}, 200},
		{"ims the Topology's build", []string{"if-modified-since", built.UTC().Format(http.TimeFormat)}, 200},
		{"ims a minute after the build", []string{"if-modified-since", built.Add(time.Minute).UTC().Format(http.TimeFormat)}, 200},
		{"ims in a year", []string{"if-modified-since", time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat)}, 200},
		{"inm the front's Etag", []string{"if-none-match", etag}, 304},
		{"inm the front's Etag and ims", []string{"if-none-match", etag, "if-modified-since", time.Now().UTC().Format(http.TimeFormat)}, 304},
		{"inm another Etag and ims", []string{"if-none-match", `"ABC"`, "if-modified-since", time.Now().UTC().Format(http.TimeFormat)}, 200},
	} {
		before := time.Now().Truncate(time.Second)
		_, last := h.exchange(t, envoyHeaders("GET", "/openapi/v3", c.extra...), "200")
		after := time.Now()
		ir := last.GetImmediateResponse()
		if ir == nil {
			t.Errorf("%s: no front answer: %v", c.name, last)
			continue
		}
		if uint32(ir.Status.GetCode()) != c.code || header(ir, "etag") != etag {
			t.Errorf("%s: front answered %d Etag %s, want %d Etag %s", c.name, ir.Status.GetCode(), header(ir, "etag"), c.code, etag)
		}
		if c.code != 200 {
			continue
		}
		// Last-Modified is the time of the answer, as kube-aggregator's, not the build time.
		lm, err := http.ParseTime(header(ir, "last-modified"))
		if err != nil || lm.Before(before) || lm.After(after) {
			t.Errorf("%s: Last-Modified %q (%v), want the time of the answer in [%v, %v]", c.name, header(ir, "last-modified"), err, before, after)
		}
	}
}

// TestDuplicateHeadersReadFirst: a header sent twice is read as the apiserver reads it (net/http's
// Header.Get: the first occurrence, an empty one included), for the OpenAPI answers and for
// discovery: Accept, If-None-Match and Range.
func TestDuplicateHeadersReadFirst(t *testing.T) {
	h := startServer(t)
	top := discovery.Build("served-1", time.Now(), servedFacts(t))
	h.src.t.Store(top)
	spec := top.OpenAPIMerged(keyAdmission)
	if spec == nil {
		t.Fatal("not merged")
	}
	etag := strconv.Quote(spec.Hash)
	doc := "/openapi/v3/" + keyAdmission + "?hash=" + spec.Hash
	for _, c := range []struct {
		name, path string
		extra      []string
		code       uint32
		ct         string
		bodyLen    int // -1: any
	}{
		{"accept json then protobuf", doc, []string{"accept", "application/json", "accept", acceptProto}, 200, "application/json", len(spec.JSON)},
		{"accept protobuf then json", doc, []string{"accept", acceptProto, "accept", "application/json"}, 200, acceptProto, -1},
		{"accept empty then protobuf", doc, []string{"accept", "", "accept", acceptProto}, 200, "application/json", len(spec.JSON)},
		{"inm own then other", doc, []string{"if-none-match", etag, "if-none-match", `"ABC"`}, 304, "", 0},
		{"inm other then own", doc, []string{"if-none-match", `"ABC"`, "if-none-match", etag}, 200, "application/json", len(spec.JSON)},
		{"range 10 then 20 bytes", doc, []string{"range", "bytes=0-9", "range", "bytes=0-19"}, 206, "application/json", 10},
		{"discovery accept json then protobuf", "/apis", []string{"accept", acceptV2, "accept", acceptV2Proto}, 200, "application/json;g=apidiscovery.k8s.io;v=v2", -1},
		{"discovery accept protobuf then json", "/apis", []string{"accept", acceptV2Proto, "accept", acceptV2}, 200, protobufType + ";g=apidiscovery.k8s.io;v=v2", -1},
	} {
		_, last := h.exchange(t, envoyHeaders("GET", c.path, c.extra...), "200")
		ir := last.GetImmediateResponse()
		if ir == nil {
			t.Errorf("%s: no front answer: %v", c.name, last)
			continue
		}
		ct := header(ir, "content-type")
		if uint32(ir.Status.GetCode()) != c.code || (c.ct == "" && ct != "") || !strings.Contains(ct, c.ct) ||
			(c.bodyLen >= 0 && len(ir.Body) != c.bodyLen) {
			t.Errorf("%s: front answered %d %q with %d bytes, want %d %q with %d", c.name, ir.Status.GetCode(), ct, len(ir.Body), c.code, c.ct, c.bodyLen)
		}
	}
}
