package extproc

import (
	"github.com/skewgate/skewgate/internal/openapitest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/handler3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/openapi"
)

func TestOpenAPIPath(t *testing.T) {
	type split struct {
		key, query  string
		index, ours bool
	}
	for p, want := range map[string]split{
		"/openapi/v3":                            {index: true, ours: true},
		"/openapi/v3?timeout=32s":                {query: "timeout=32s", index: true, ours: true},
		"/openapi/v3/":                           {},
		"/openapi/v3/api/v1":                     {key: "api/v1", ours: true},
		"/openapi/v3/apis/g/v?hash=x":            {key: "apis/g/v", query: "hash=x", ours: true},
		"/openapi/v3/apis/g/v/":                  {key: "apis/g/v/", ours: true}, // handler3: another key
		"/openapi/v3/version":                    {key: "version", ours: true},
		"/openapi/v3/apis%2Fg/v":                 {},
		"/openapi/v3/%61pis/g/v":                 {},
		"/openapi/v3/apis/g/v#f":                 {},
		"/openapi/v2":                            {},
		"/openapi/v2/x":                          {},
		"/openapi/v3x":                           {},
		"/openapi":                               {},
		"/apis/apps/v1":                          {},
		"/openapi/v3/.well-known/openid-config":  {key: ".well-known/openid-config", ours: true},
		"/openapi/v3/apis/g/v?hash=x&hash=y#???": {key: "apis/g/v", query: "hash=x&hash=y#???", ours: true},
	} {
		key, query, index, ok := decision.OpenAPIPath(p)
		if got := (split{key, query, index, ok}); got != want {
			t.Errorf("OpenAPIPath(%q) = %+v, want %+v", p, got, want)
		}
		if ok {
			// The key is the one a real handler3 serves at that path.
			u, err := url.ParseRequestURI(p)
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			handler3Agrees(t, p, u, key, index)
		}
	}
}

const (
	keyApps      = "apis/apps/v1"
	keyAdmission = "apis/admissionregistration.k8s.io/v1"
	keyWidgets   = "apis/example.com/v1"
)

// openAPIFacts are skewedFacts with OpenAPI v3 indexes: api/v1 and version the same everywhere;
// apps/v1 with one hash per version (every upstream serves it whole: routed to the newest, new and
// gone); admissionregistration only new serves whole (routed to new); example.com only the unready
// gone lists (503).
func openAPIFacts() []discovery.UpstreamFacts {
	facts := skewedFacts()
	idx := map[string]map[string]string{
		"old":  {"api/v1": "C", "version": "V", keyApps: "A35", keyAdmission: "R35"},
		"new":  {"api/v1": "C", "version": "V", keyApps: "A36", keyAdmission: "R36"},
		"gone": {"api/v1": "C", "version": "V", keyApps: "A36", keyAdmission: "R36g", keyWidgets: "W"},
	}
	for i := range facts {
		facts[i].OpenAPI = &discovery.OpenAPIIndex{Keys: idx[facts[i].Name], Hash: facts[i].Name}
	}
	return facts
}

func TestOpenAPIDecisionsRoute(t *testing.T) {
	h := startServer(t)
	top := discovery.Build("openapi-1", time.Now(), openAPIFacts())
	h.src.t.Store(top)
	// The decisions this test relies on, as discovery made them.
	newer := wire.SetCluster([]string{"gone", "new"})
	for key, want := range map[string]discovery.Action{"api/v1": discovery.ActionDefault, keyApps: discovery.ActionRoute,
		keyAdmission: discovery.ActionRoute, keyWidgets: discovery.ActionUnavailable} {
		if d := top.DecideOpenAPI(key); d.Action != want {
			t.Fatalf("%s: %+v, want action %d", key, d, want)
		}
	}
	schemas := want{cluster: wire.AllCluster}
	if d := top.DecideSchemas(); d.Action == discovery.ActionRoute {
		schemas = want{cluster: wire.SetCluster(d.Set.Members())}
	}
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	cases := []struct {
		method, path string
		extra        []string
		md           []string
		w            want
	}{
		{"GET", "/openapi/v3/" + keyApps + "?hash=A36", nil, nil, want{cluster: newer}},
		{"GET", "/openapi/v3/" + keyApps + "?hash=A35", nil, nil, want{cluster: newer}},
		{"HEAD", "/openapi/v3/" + keyApps, nil, nil, want{cluster: newer}},
		{"GET", "/openapi/v3/" + keyApps, nil, none, want{cluster: wire.AnonCluster(newer)}},
		{"GET", "/openapi/v3/" + keyApps, []string{"upgrade", "websocket"}, nil, want{cluster: wire.HTTP1Cluster(newer)}},
		{"GET", "/openapi/v3/" + keyAdmission + "?hash=R36", nil, nil, want{cluster: wire.UpstreamCluster("new")}},
		{"GET", "/openapi/v3/" + keyWidgets + "?hash=W", nil, nil, want{code: 503, reason: "ServiceUnavailable"}},
		// default and unknown keys, escapes, the other schema paths: the schemas row
		{"GET", "/openapi/v3/api/v1", nil, nil, schemas},
		{"GET", "/openapi/v3/apis/nothing.example/v1", nil, nil, schemas},
		{"GET", "/openapi/v3/%61pis/apps/v1", nil, nil, schemas},
		{"GET", "/openapi/v3/" + keyApps + "/", nil, nil, schemas},
		{"GET", "/openapi/v3/", nil, nil, schemas},
		{"GET", "/openapi/v2", nil, nil, schemas},
		{"POST", "/openapi/v3", nil, nil, schemas},
		{"HEAD", "/openapi/v3", nil, nil, schemas},
	}
	for _, c := range cases {
		first, last := h.exchange(t, envoyHeaders(c.method, c.path, c.extra...), "200", c.md...)
		if first.GetModeOverride() != nil {
			t.Errorf("%s %s: asks for the response headers", c.method, c.path)
		}
		check(t, c.method+" "+c.path, last, c.w)
	}
	if ir := h.roundTrip(t, envoyHeaders("GET", "/openapi/v3/"+keyWidgets)).GetImmediateResponse(); header(ir, "retry-after") == "" {
		t.Errorf("503 without Retry-After: %v", ir)
	}
}

// TestOpenAPIIndexNeedsConsent: the front's index replaces the apiserver's answer only when the
// apiserver's status proves the request was authorized.
func TestOpenAPIIndexNeedsConsent(t *testing.T) {
	h := startServer(t)
	top := discovery.Build("openapi-1", time.Now(), openAPIFacts())
	h.src.t.Store(top)
	idx := top.OpenAPIIndex()
	if idx == nil {
		t.Fatal("no index for a skewed Topology")
	}
	etag := strconv.Quote(idx.Hash)
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	counts := map[string]int{}
	for _, c := range []struct {
		upstream, ifNoneMatch string
		md                    []string
		code                  int // 0: the apiserver's answer passes
	}{
		{upstream: "200", code: 200}, {upstream: "304", code: 200}, {upstream: "301", code: 200}, {upstream: "404", code: 200},
		{upstream: "200", ifNoneMatch: etag, code: 304}, {upstream: "200", md: none, code: 200},
		{upstream: "401"}, {upstream: "403", md: none}, {upstream: "429"}, {upstream: "500"}, {upstream: "503"}, {upstream: ""},
	} {
		name := "upstream " + c.upstream + " inm=" + c.ifNoneMatch
		var extra []string
		if c.ifNoneMatch != "" {
			extra = []string{"if-none-match", c.ifNoneMatch}
		}
		first, last := h.exchange(t, envoyHeaders("GET", "/openapi/v3", extra...), c.upstream, c.md...)
		cluster := wire.AllCluster
		if c.md != nil {
			cluster = wire.AnonCluster(cluster)
		}
		check(t, name+" (request phase)", first, want{cluster: cluster})
		if !proto.Equal(first.GetModeOverride(), discoveryMode) {
			t.Fatalf("%s: mode_override %v", name, first.GetModeOverride())
		}
		ir := last.GetImmediateResponse()
		if c.code == 0 {
			counts[OpenAPIPassed]++
			if ir != nil || last.GetResponseHeaders() == nil {
				t.Errorf("%s: want the apiserver's answer, got %v", name, last)
			}
			continue
		}
		if ir == nil || int(ir.Status.Code) != c.code || header(ir, "etag") != etag {
			t.Errorf("%s: want the front's index %d, got %v", name, c.code, last)
			continue
		}
		if c.code == 304 {
			counts[OpenAPINotModified]++
			if len(ir.Body) != 0 {
				t.Errorf("%s: 304 with a body", name)
			}
			continue
		}
		counts[OpenAPIServed]++
		if string(ir.Body) != string(idx.JSON) || header(ir, "content-type") != "application/json" ||
			header(ir, "cache-control") != "no-cache, private" || header(ir, "last-modified") == "" {
			t.Errorf("%s: not the front's index as handler3 serves it: %v", name, ir.Headers)
		}
	}
	for _, o := range []string{OpenAPIServed, OpenAPINotModified, OpenAPIPassed, OpenAPIRedirected} {
		if got := testutil.ToFloat64(h.srv.metrics.openAPIResponses.WithLabelValues(OpenAPIIndex, o)); int(got) != counts[o] {
			t.Errorf("openapi responses{index,%s} = %v, want %d", o, got, counts[o])
		}
	}

	// Every upstream publishing the same index: no index of the front's, the apiserver answers.
	same := openAPIFacts()
	for i := range same {
		same[i].OpenAPI = &discovery.OpenAPIIndex{Keys: map[string]string{"api/v1": "C"}, Hash: "same"}
	}
	h.src.t.Store(discovery.Build("openapi-2", time.Now(), same))
	if first, _ := h.exchange(t, envoyHeaders("GET", "/openapi/v3"), "200"); first.GetModeOverride() != nil {
		t.Errorf("identical indexes: the front asks for the response headers")
	}
}

// servedFacts: old (v1.35.4) serves validatingadmissionpolicies, new (v1.36.3) only the mutating
// ones: nobody serves all of admissionregistration.k8s.io/v1, so the front merges the two captured
// documents (ActionServe) and falls back to the group serving most of it.
func servedFacts(t testing.TB) []discovery.UpstreamFacts {
	core := doc("core", grp("", "v1", rsc("pods", "exec", "log", "status"), rsc("configmaps")))
	old := doc("old", grp("admissionregistration.k8s.io", "v1", rsc("validatingadmissionpolicies", "status")))
	neu := doc("new", grp("admissionregistration.k8s.io", "v1", rsc("mutatingadmissionpolicies")))
	var facts []discovery.UpstreamFacts
	for _, u := range []struct {
		name, version string
		apis          *discovery.Document
	}{{"old", "v1.35.4", old}, {"new", "v1.36.3", neu}} {
		spec := specOf(openapitest.Doc(t, u.version, keyAdmission), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
		facts = append(facts, discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: u.name, Ready: true, Version: u.version}, API: core, APIs: u.apis,
			OpenAPI:     &discovery.OpenAPIIndex{Keys: map[string]string{"api/v1": "C", keyAdmission: spec.Hash}, Hash: u.name},
			OpenAPIDocs: map[string]*discovery.OpenAPISpec{keyAdmission: spec},
		})
	}
	return facts
}

// TestOpenAPIServeNeedsConsent: a merged document is served only after an apiserver of the
// fallback set authorized the same request, exactly as handler3 would answer it; everything else
// goes to that set.
func TestOpenAPIServeNeedsConsent(t *testing.T) {
	h := startServer(t)
	top := discovery.Build("served-1", time.Now(), servedFacts(t))
	h.src.t.Store(top)
	d := top.DecideOpenAPI(keyAdmission)
	spec := top.OpenAPIMerged(keyAdmission)
	if d.Action != discovery.ActionServe || spec == nil || d.Hash != spec.Hash {
		t.Fatalf("decision %+v, merged %v: want served", d, spec != nil)
	}
	fallback := wire.UpstreamCluster(d.Set.Members()[0])
	if len(d.Set.Members()) != 1 {
		fallback = wire.SetCluster(d.Set.Members())
	}
	etag := strconv.Quote(spec.Hash)
	own := "/openapi/v3/" + keyAdmission + "?hash=" + spec.Hash
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	counts := map[string]int{}
	for _, c := range []struct {
		path, accept, ifNoneMatch, upstream string
		md                                  []string
		code                                int // 0: the apiserver's answer passes
		ct                                  string
	}{
		{path: own, upstream: "200", code: 200, ct: "application/json"},
		{path: own, upstream: "301", code: 200, ct: "application/json"},
		{path: own, upstream: "304", code: 200, ct: "application/json"},
		{path: own, upstream: "404", code: 200, ct: "application/json"},
		{path: own, upstream: "206", code: 200, ct: "application/json"},
		{path: own, upstream: "412", code: 200, ct: "application/json"},
		{path: own, upstream: "416", code: 200, ct: "application/json"},
		{path: own, upstream: "200", md: none, code: 200, ct: "application/json"},
		{path: own, accept: acceptProto, upstream: "301", code: 200, ct: acceptProto},
		{path: own, ifNoneMatch: etag, upstream: "200", code: 304},
		{path: "/openapi/v3/" + keyAdmission + "?hash=" + strings.Repeat("A", 128), upstream: "301", code: 301, ct: "application/json"},
		{path: "/openapi/v3/" + keyAdmission, upstream: "200", code: 200, ct: "application/json"},
		{path: own, upstream: "401"}, {path: own, upstream: "403", md: none}, {path: own, upstream: "429"}, {path: own, upstream: "406"},
		{path: own, upstream: "500"}, {path: own, upstream: "503"}, {path: own, upstream: ""},
	} {
		name := c.path + " accept=" + c.accept + " inm=" + c.ifNoneMatch + " upstream=" + c.upstream
		extra := []string{}
		if c.accept != "" {
			extra = append(extra, "accept", c.accept)
		}
		if c.ifNoneMatch != "" {
			extra = append(extra, "if-none-match", c.ifNoneMatch)
		}
		first, last := h.exchange(t, envoyHeaders("GET", c.path, extra...), c.upstream, c.md...)
		cluster := fallback
		if c.md != nil {
			cluster = wire.AnonCluster(cluster)
		}
		check(t, name+" (request phase)", first, want{cluster: cluster})
		if first.GetImmediateResponse() != nil || !proto.Equal(first.GetModeOverride(), discoveryMode) {
			t.Fatalf("%s: request phase %v", name, first)
		}
		ir := last.GetImmediateResponse()
		if c.code == 0 {
			counts[OpenAPIPassed]++
			if ir != nil || last.GetResponseHeaders() == nil {
				t.Errorf("%s: want the apiserver's answer, got %v", name, last)
			}
			continue
		}
		if ir == nil || int(ir.Status.Code) != c.code || header(ir, "etag") != etag || header(ir, "content-type") != c.ct {
			t.Errorf("%s: want the front's %d %s, got %v", name, c.code, c.ct, last)
			continue
		}
		switch c.code {
		case 301:
			counts[OpenAPIRedirected]++
			if header(ir, "location") != own || len(ir.Body) != 0 {
				t.Errorf("%s: redirect to %q with %d bytes", name, header(ir, "location"), len(ir.Body))
			}
		case 304:
			counts[OpenAPINotModified]++
		default:
			counts[OpenAPIServed]++
			if c.ct == "application/json" && string(ir.Body) != string(spec.JSON) {
				t.Errorf("%s: not the merged document", name)
			}
			immutable := strings.Contains(c.path, "hash=")
			if (header(ir, "cache-control") == "public, immutable") != immutable || (header(ir, "expires") != "") != immutable {
				t.Errorf("%s: cache-control %q, expires %q", name, header(ir, "cache-control"), header(ir, "expires"))
			}
		}
	}
	for _, o := range []string{OpenAPIServed, OpenAPIRedirected, OpenAPINotModified, OpenAPIPassed} {
		if got := testutil.ToFloat64(h.srv.metrics.openAPIResponses.WithLabelValues(OpenAPIDocument, o)); int(got) != counts[o] {
			t.Errorf("openapi responses{document,%s} = %v, want %d", o, got, counts[o])
		}
	}

	// Not answered by the front: to the fallback set, without asking for the response; or, for an
	// Accept that offers nothing handler3 serves (read only once the request is authorized), asking
	// for it and passing the apiserver's answer (its 406, or its empty 200 for an Accept of no clause).
	for _, c := range []struct {
		method, accept, upstream string
		asks                     bool
	}{{"GET", "text/html", "406", true}, {"HEAD", "", "200", false}, {"POST", "", "200", false}, {"GET", ",", "200", true}} {
		first, last := h.exchange(t, envoyHeaders(c.method, own, "accept", c.accept), c.upstream)
		if (first.GetModeOverride() != nil) != c.asks {
			t.Errorf("%s accept=%q: asks for the response headers: %v, want %v", c.method, c.accept, first.GetModeOverride() != nil, c.asks)
		}
		check(t, c.method+" "+c.accept, first, want{cluster: fallback})
		if last.GetImmediateResponse() != nil {
			t.Errorf("%s accept=%q: the front answered %v", c.method, c.accept, last)
		}
	}
}

// TestOpenAPIProtobufRenderedAhead: the protobuf form of a merged document is rendered in the
// background once a Topology is seen, and a later Topology serving the same document keeps it.
func TestOpenAPIProtobufRenderedAhead(t *testing.T) {
	var calls atomic.Int32
	rendered := make(chan struct{}, 16)
	h := startServer(t, func(s *Server) {
		s.openAPIConfig = openapi.FrontConfig{Render: func(b []byte) ([]byte, error) {
			defer func() { rendered <- struct{}{} }()
			calls.Add(1)
			return handler3.ToV3ProtoBinary(b)
		}}
	})
	facts := servedFacts(t)
	h.src.t.Store(discovery.Build("served-1", time.Now(), facts))
	h.exchange(t, envoyHeaders("GET", "/openapi/v3/"+keyAdmission), "200") // any OpenAPI request
	select {
	case <-rendered:
	case <-time.After(time.Minute):
		t.Fatal("the protobuf form was not rendered in the background")
	}
	f := h.srv.frontOpenAPI.load()
	h.src.t.Store(discovery.Build("served-2", time.Now(), facts))
	h.exchange(t, envoyHeaders("GET", "/openapi/v3/"+keyAdmission), "200")
	next := h.srv.frontOpenAPI.load()
	if next == f || next.t.Version != "served-2" {
		t.Fatalf("the next Topology's answers are %s's", next.t.Version)
	}
	if r := next.document(keyAdmission, next.Merged(keyAdmission), &openAPIRequest{accept: acceptProto}); r == nil || calls.Load() != 1 {
		t.Errorf("the next Topology's answers (%s) lost the rendering: %d renderings", next.t.Version, calls.Load())
	}
}

// FuzzOpenAPIPath: whatever the path the classifier accepts, a key the front decides is never
// empty, and a real handler3 (registered as an apiserver registers it) holding that key serves its
// document at the path Go's server decodes; where the front serves its index, handler3 serves its.
func FuzzOpenAPIPath(f *testing.F) {
	for _, s := range []string{"/openapi/v3", "/openapi/v3/apis/g/v?hash=x", "/openapi/v3/", "/openapi/v3/%41", "/openapi/v3/a/b/?#", "/openapi/v3/\xd0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if _, err := decision.Classify("GET", p); err != nil {
			return // refused (400) before any decision
		}
		key, query, index, ok := decision.OpenAPIPath(p)
		if !ok {
			return
		}
		path, rawQuery, _ := strings.Cut(p, "?")
		u, err := url.ParseRequestURI(p)
		if err != nil {
			t.Fatalf("%q: decided (key %q), but Go's server refuses it: %v", p, key, err)
		}
		if u.Path != path || u.RawQuery != rawQuery || query != rawQuery {
			t.Fatalf("%q: decided (key %q, query %q), but Go's server reads path %q query %q", p, key, query, u.Path, u.RawQuery)
		}
		if !index && key == "" {
			t.Fatalf("%q: empty key", p)
		}
		handler3Agrees(t, p, u, key, index)
	})
}
