// Package equivalence holds Envoy's own route table (xds) to the decisions of ext_proc (extproc):
// for every request shape, the route the test data plane's matcher picks from the generated table
// (what a request keeps when ext_proc fails open) and the answer ext_proc gives name the same
// cluster or the same 503.
package equivalence

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/extproc"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/xds"
)

func options() xds.Options {
	return xds.Options{
		ServingCertFile: "/etc/skewgate/front/tls.crt", ServingKeyFile: "/etc/skewgate/front/tls.key",
		ClientCAFile: "/etc/kubernetes/pki/ca.crt", UpstreamCAFile: "/etc/kubernetes/pki/ca.crt",
		FrontProxyCertFile: "/etc/kubernetes/pki/front-proxy-client.crt", FrontProxyKeyFile: "/etc/kubernetes/pki/front-proxy-client.key",
		ExtProcAddress: "127.0.0.1:18001",
	}
}

// outcome is where a request ends: a cluster, or a status Envoy or ext_proc answers itself.
type outcome struct {
	cluster string
	status  int
	route   string // the route the table chose, for messages
}

func (o outcome) String() string {
	if o.cluster != "" {
		return o.cluster
	}
	return fmt.Sprint(o.status)
}

func isSkewRoute(name string) bool {
	return strings.HasPrefix(name, "skew:") || strings.HasPrefix(name, "anonymous-skew:")
}

type fixture struct {
	top    *discovery.Topology
	table  *routev3.RouteConfiguration // as served
	plain  *routev3.RouteConfiguration // without the skew routes: what the default routes decide
	server *extproc.Server
}

type staticSource struct{ t *discovery.Topology }

func (s staticSource) Current() *discovery.Topology { return s.t }

func newFixture(t testing.TB) *fixture {
	top := testTopology()
	rs, err := xds.Translate(top, options())
	if err != nil {
		t.Fatal(err)
	}
	plain := proto.Clone(rs.Routes[0]).(*routev3.RouteConfiguration)
	vh := plain.VirtualHosts[0]
	var kept []*routev3.Route
	for _, r := range vh.Routes {
		if !isSkewRoute(r.Name) {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(vh.Routes) {
		t.Fatal("the route table has no skew routes")
	}
	vh.Routes = kept
	return &fixture{top: top, table: rs.Routes[0], plain: plain,
		server: extproc.NewServer(staticSource{top}, nil, prometheus.NewRegistry())}
}

// request is one request as it reaches the connection manager.
type request struct {
	method, path       string
	anonymous, upgrade bool
}

func (r request) header() http.Header {
	h := http.Header{}
	if !r.anonymous {
		h.Set("Authorization", "Bearer token") // a credential: the route is not the anonymous twin
	}
	if r.upgrade {
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
	}
	return h
}

// failOpen is what Envoy's table decides alone.
func (f *fixture) failOpen(t testing.TB, r request, path string) outcome {
	rt := dataplane.SelectRoute(f.table, r.method, path, r.header())
	if rt == nil {
		t.Fatalf("%+v: no route", r)
	}
	if dr := rt.GetDirectResponse(); dr != nil {
		return outcome{status: int(dr.Status), route: rt.Name}
	}
	c := rt.GetRoute().GetCluster()
	if c == "" {
		t.Fatalf("%+v: route %s names no cluster", r, rt.Name)
	}
	return outcome{cluster: c, route: rt.Name}
}

// decided is what ext_proc answers for the request, resolved the way Envoy applies it: an immediate
// response, the cluster it names, or (no cluster named) the default routes' cluster.
func (f *fixture) decided(t testing.TB, r request, path string) outcome {
	hs := []*corev3.HeaderValue{{Key: ":method", RawValue: []byte(r.method)}, {Key: ":path", RawValue: []byte(path)},
		{Key: ":authority", RawValue: []byte("front")}, {Key: ":scheme", RawValue: []byte("https")}}
	if r.upgrade {
		hs = append(hs, &corev3.HeaderValue{Key: "upgrade", RawValue: []byte("websocket")})
	}
	md := metadata.MD{}
	if r.anonymous {
		md.Set(wire.CredentialsMetadata, wire.CredentialsNone)
	}
	s := &stream{ctx: metadata.NewIncomingContext(context.Background(), md), in: []*extprocv3.ProcessingRequest{{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: true}},
	}}}
	if err := f.server.Process(s); err != nil {
		t.Fatalf("%+v: ext_proc: %v", r, err)
	}
	if len(s.out) != 1 {
		t.Fatalf("%+v: ext_proc sent %d responses", r, len(s.out))
	}
	if ir := s.out[0].GetImmediateResponse(); ir != nil {
		return outcome{status: int(ir.GetStatus().GetCode())}
	}
	for _, h := range s.out[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == wire.RouteHeader {
			return outcome{cluster: string(h.GetHeader().GetRawValue()) + h.GetHeader().GetValue()}
		}
	}
	rt := dataplane.SelectRoute(f.plain, r.method, path, r.header())
	return outcome{cluster: rt.GetRoute().GetCluster(), route: rt.GetName()}
}

// stream is one ext_proc stream carrying the given requests.
type stream struct {
	grpc.ServerStream
	ctx context.Context
	in  []*extprocv3.ProcessingRequest
	out []*extprocv3.ProcessingResponse
}

func (s *stream) Context() context.Context { return s.ctx }
func (s *stream) Send(r *extprocv3.ProcessingResponse) error {
	s.out = append(s.out, r)
	return nil
}
func (s *stream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	r := s.in[0]
	s.in = s.in[1:]
	return r, nil
}

// verdict compares the two for one request; it returns what was compared ("routed", "503",
// "default", "invalid") or a reason the request is not compared.
func (f *fixture) verdict(t testing.TB, r request) string {
	t.Helper()
	path, ok := canonical(r.path)
	if !ok {
		return "refused by the codec"
	}
	got := f.failOpen(t, r, path)
	want := f.decided(t, r, path)
	c, cerr := decision.Classify(r.method, path)
	switch {
	case want.status == http.StatusBadRequest:
		// ext_proc refuses what it cannot classify. A skew route may take it only for an invalid
		// percent-escape, which every apiserver refuses (400) before any handler: Go's server
		// cannot unescape the path.
		p, _, _ := strings.Cut(path, "?")
		if _, err := url.PathUnescape(p); isSkewRoute(got.route) && err == nil {
			t.Errorf("%+v (path %q): ext_proc refuses it (400), the table routes it by %s to %v", r, path, got.route, got)
		}
		return "invalid"
	case cerr == nil && c.Kind == decision.Discovery:
		// ext_proc answers discovery at the front; failing open, an apiserver answers its own.
		if isSkewRoute(got.route) {
			t.Errorf("%+v: discovery path taken by %s", r, got.route)
		}
		return "discovery"
	case cerr == nil && c.Verb == "proxy":
		// The legacy /proxy/ prefix: no apiserver serves it any more, the table has no route for it.
		if isSkewRoute(got.route) {
			t.Errorf("%+v: legacy proxy path taken by %s", r, got.route)
		}
		return "legacy proxy prefix"
	case encodedSlash(path):
		// %2F inside a segment: the apiserver splits at it, Envoy's patterns do not (documented).
		return "encoded slash"
	case queryAmbiguous(path) && c.Kind == decision.Resource && f.top.Decide(c.Key, "list") != f.top.Decide(c.Key, "watch"):
		// ';', '+' and invalid escapes in the query: Go drops or decodes such pairs, Envoy does not.
		return "query Envoy parses differently"
	}
	if got.cluster != want.cluster || got.status != want.status {
		t.Errorf("%+v (path %q): the table picks %v (route %s), ext_proc decides %v", r, path, got, got.route, want)
	}
	switch {
	case want.status == http.StatusServiceUnavailable:
		return "503"
	case isSkewRoute(got.route):
		return "routed"
	}
	return "default"
}

// canonical is the path as Envoy's codec and normalize_path leave it: control characters and
// spaces refused, a fragment refused (http_reject_path_with_fragment), other bytes outside printable
// ASCII percent-encoded (url::CanonicalizePath), then normalized as the data plane does (which
// refuses an escaped NUL with 400, before any route or ext_proc).
func canonical(p string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c <= ' ' || c == 0x7f || c == '#':
			return "", false
		case c >= 0x80:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 || b.String()[0] != '/' {
		return "", false
	}
	return dataplane.NormalizeRequestPath(b.String())
}

func encodedSlash(path string) bool {
	p, _, _ := strings.Cut(path, "?")
	return strings.Contains(strings.ToLower(p), "%2f")
}

func queryAmbiguous(path string) bool {
	_, q, _ := strings.Cut(path, "?")
	return strings.ContainsAny(q, ";+%")
}
