package xds

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/extproc"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/test/dataplane"
)

// oneStream is an ext_proc stream carrying one request_headers message.
type oneStream struct {
	grpc.ServerStream
	ctx context.Context
	in  *extprocv3.ProcessingRequest
	out *extprocv3.ProcessingResponse
}

func (s *oneStream) Context() context.Context { return s.ctx }
func (s *oneStream) Send(r *extprocv3.ProcessingResponse) error {
	s.out = r
	return nil
}
func (s *oneStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if s.in == nil {
		return nil, io.EOF
	}
	r := s.in
	s.in = nil
	return r, nil
}

// TestOpenAPIRoutesMatchExtProc holds the route table's OpenAPI routes (what a request keeps when
// ext_proc fails open, as the test data plane's route matcher picks it) to ext_proc's request-phase
// answer for every decided key, method, query, with and without credentials: the same cluster. The
// exceptions are by design: an unavailable key is answered 503 by ext_proc and has no route (the
// schema routes take it), and an upgrade is left to the upgrade routes.
func TestOpenAPIRoutesMatchExtProc(t *testing.T) {
	compared := map[discovery.Action]int{}
	compareOpenAPIRoutes(t, loadScenario(t, "testdata/openapi-skewed.in.yaml"), compared)
	compareOpenAPIRoutes(t, servedTopology(t), compared)
	for _, a := range []discovery.Action{discovery.ActionRoute, discovery.ActionServe, discovery.ActionUnavailable, discovery.ActionDefault} {
		if compared[a] == 0 {
			t.Errorf("compared %v: no key decided %d", compared, a)
		}
	}
}

func compareOpenAPIRoutes(t *testing.T, top *discovery.Topology, compared map[discovery.Action]int) {
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	table := rs.Routes[0]
	srv := extproc.NewServer(constSource{top}, nil, prometheus.NewRegistry())
	keys := []string{"api/v1", "version", "apis/late.example/v1", "apis/unknown.example/v1"}
	for _, d := range top.OpenAPIDecisions() {
		keys = append(keys, d.Key)
	}
	for _, key := range keys {
		action := top.DecideOpenAPI(key).Action
		for _, method := range []string{"GET", "HEAD", "POST"} {
			for _, query := range []string{"", "?hash=" + top.DecideOpenAPI(key).Hash, "?hash=ABC&x=y"} {
				for _, anonymous := range []bool{false, true} {
					path := "/openapi/v3/" + key + query
					h := http.Header{}
					if !anonymous {
						h.Set("Authorization", "Bearer token")
					}
					rt := dataplane.SelectRoute(table, method, path, h)
					cluster, status := extProcAnswer(t, srv, method, path, anonymous)
					name := method + " " + path
					if anonymous {
						name += " (anonymous)"
					}
					switch {
					case action == discovery.ActionUnavailable:
						if status != 503 || strings.Contains(rt.GetName(), "openapi:") {
							t.Errorf("%s: ext_proc %d, table route %s", name, status, rt.GetName())
						}
					case status != 0:
						t.Errorf("%s: ext_proc answers %d", name, status)
					case action == discovery.ActionDefault:
						if strings.Contains(rt.GetName(), "openapi:") {
							t.Errorf("%s: default key with an OpenAPI route %s", name, rt.GetName())
						}
					default:
						if got := rt.GetRoute().GetCluster(); got != cluster || !strings.Contains(rt.GetName(), "openapi:") {
							t.Errorf("%s: table %s -> %s, ext_proc -> %s", name, rt.GetName(), got, cluster)
						}
					}
					compared[action]++
				}
			}
		}
	}
	// An upgrade never takes an OpenAPI route: it needs an HTTP/1.1 cluster.
	h := http.Header{"Authorization": {"Bearer token"}, "Upgrade": {"websocket"}}
	if rt := dataplane.SelectRoute(table, "GET", "/openapi/v3/apis/apps/v1", h); strings.Contains(rt.GetName(), "openapi:") || !strings.HasSuffix(rt.GetRoute().GetCluster(), wire.HTTP1Suffix) {
		t.Errorf("upgrade: route %s -> %s", rt.GetName(), rt.GetRoute().GetCluster())
	}
}

type constSource struct{ t *discovery.Topology }

func (s constSource) Current() *discovery.Topology { return s.t }

// extProcAnswer runs the request phase and returns the cluster ext_proc names, or the status of its
// immediate response.
func extProcAnswer(t *testing.T, srv *extproc.Server, method, path string, anonymous bool) (string, int) {
	t.Helper()
	hs := []*corev3.HeaderValue{{Key: ":method", RawValue: []byte(method)}, {Key: ":path", RawValue: []byte(path)},
		{Key: ":authority", RawValue: []byte("front")}, {Key: ":scheme", RawValue: []byte("https")}}
	md := metadata.MD{}
	if anonymous {
		md.Set(wire.CredentialsMetadata, wire.CredentialsNone)
	}
	s := &oneStream{ctx: metadata.NewIncomingContext(context.Background(), md), in: &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: true}},
	}}
	if err := srv.Process(s); err != nil {
		t.Fatal(err)
	}
	if ir := s.out.GetImmediateResponse(); ir != nil {
		return "", int(ir.GetStatus().GetCode())
	}
	for _, h := range s.out.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == wire.RouteHeader {
			return string(h.GetHeader().GetRawValue()), 0
		}
	}
	t.Fatalf("%s %s: ext_proc names no cluster", method, path)
	return "", 0
}
