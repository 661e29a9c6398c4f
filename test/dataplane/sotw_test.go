package dataplane

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// scriptedADS is an ADS server the test answers by hand: every state-of-the-world request of the
// stream reaches the test in order, and the test decides each response.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	addr  string
	reqs  chan *discoveryv3.DiscoveryRequest
	resps chan *discoveryv3.DiscoveryResponse
}

func startScriptedADS(t *testing.T) *scriptedADS {
	t.Helper()
	s := &scriptedADS{reqs: make(chan *discoveryv3.DiscoveryRequest, 64), resps: make(chan *discoveryv3.DiscoveryResponse)}
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return s
}

func (s *scriptedADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			s.reqs <- r
		}
	}()
	for {
		select {
		case r := <-s.resps:
			if err := st.Send(r); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}

// next returns the stream's next n requests.
func (s *scriptedADS) next(t *testing.T, n int) []*discoveryv3.DiscoveryRequest {
	t.Helper()
	var out []*discoveryv3.DiscoveryRequest
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case r := <-s.reqs:
			out = append(out, r)
		case <-timeout:
			t.Fatalf("%d of %d requests arrived: %v", len(out), n, out)
		}
	}
	return out
}

// respond sends a response of typeURL with the resources.
func (s *scriptedADS) respond(t *testing.T, typeURL, version, nonce string, res ...proto.Message) {
	t.Helper()
	r := &discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Nonce: nonce}
	for _, m := range res {
		r.Resources = append(r.Resources, anyOf(t, m))
	}
	s.resps <- r
}

// byType picks the one request of typeURL from reqs.
func byType(t *testing.T, reqs []*discoveryv3.DiscoveryRequest, typeURL string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	var found *discoveryv3.DiscoveryRequest
	for _, r := range reqs {
		if r.TypeUrl == typeURL {
			if found != nil {
				t.Fatalf("two %s requests in %v", typeURL, reqs)
			}
			found = r
		}
	}
	if found == nil {
		t.Fatalf("no %s request in %v", typeURL, reqs)
	}
	return found
}

// wantTypes checks the type of each request, in order.
func wantTypes(t *testing.T, reqs []*discoveryv3.DiscoveryRequest, typeURLs ...string) {
	t.Helper()
	var got []string
	for _, r := range reqs {
		got = append(got, r.TypeUrl)
	}
	if !slices.Equal(got, typeURLs) {
		t.Fatalf("requests of types %v, want %v", got, typeURLs)
	}
}

func wantRequest(t *testing.T, r *discoveryv3.DiscoveryRequest, names []string, version, nonce string) {
	t.Helper()
	got := slices.Sorted(slices.Values(r.ResourceNames))
	if !slices.Equal(got, names) || r.VersionInfo != version || r.ResponseNonce != nonce || r.ErrorDetail != nil {
		t.Fatalf("%s request names %v, version %q, nonce %q, error %v; want names %v, version %q, nonce %q, no error",
			r.TypeUrl, got, r.VersionInfo, r.ResponseNonce, r.ErrorDetail, names, version, nonce)
	}
}

// TestSotWSecretsInEnvoysOrder: over state-of-the-world ADS the data plane asks for SDS secrets as
// Envoy does. Once it applied the clusters it asks, in one request sent before the CDS ACK, for the
// secrets their transport sockets name (source/common/upstream/cds_api_helper.cc:
// CdsApiHelper::onConfigUpdate pauses SDS while it applies the clusters, so their SDS watches go out
// together when it returns), and for nothing the listener names, which it has not seen; only once the cluster manager initialized does it ask for
// listeners, and after the listener it asks again with the union of every secret watched
// (GrpcMuxImpl::sendDiscoveryRequest in
// source/extensions/config_subscription/grpc/grpc_mux_impl.cc: one request per type naming every
// watch's resources, with the version last accepted and the nonce last received for the type). A
// response that carries only some of the secrets changes nothing for the others
// (GrpcMuxImpl::processDiscoveryResources calls a named watch only with resources it found), so a
// request through the front still reaches the mTLS upstream with the first response's secrets.
func TestSotWSecretsInEnvoysOrder(t *testing.T) {
	pki := newPKI(t)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write([]byte("a"))
	}))
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{pki.tlsPair(t, "apiserver", []string{"kubernetes.default.svc"}, false)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool}
	upstream.StartTLS()
	t.Cleanup(upstream.Close)
	clientCert, clientKey, _ := pki.issueFiles(t, filepath.Join(t.TempDir(), "client"), "front-proxy", nil, true)
	frontCert, frontKey, _ := pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
	a := plainCluster("a", strings.TrimPrefix(upstream.URL, "https://"))
	a.TransportSocket = upstreamTLSSocket(t, "client-cert")

	x := startScriptedADS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type started struct {
		dp  *DataPlane
		err error
	}
	done := make(chan started, 1)
	go func() {
		dp, err := Start(ctx, Config{XDSAddress: x.addr, NodeID: testNode, Protocol: SotW, Seed: 1, Logf: t.Logf})
		done <- started{dp, err}
	}()

	wantRequest(t, x.next(t, 1)[0], nil, "", "")
	x.respond(t, resourcev3.ClusterType, "1", "c1", a)
	reqs := x.next(t, 2) // the clusters' secrets, then the CDS ACK
	wantTypes(t, reqs, resourcev3.SecretType, resourcev3.ClusterType)
	wantRequest(t, reqs[0], []string{"client-cert", "upstream-ca"}, "", "")
	wantRequest(t, reqs[1], nil, "1", "c1")

	x.respond(t, resourcev3.SecretType, "1", "s1", caSecret("upstream-ca", pki.caFile), certSecret("client-cert", clientCert, clientKey, ""))
	// The SDS ACK and, the cluster manager initialized, LDS: in either order (Envoy sends LDS first
	// when the cluster initializes as the secrets arrive, after when a health check round follows).
	reqs = x.next(t, 2)
	wantRequest(t, byType(t, reqs, resourcev3.SecretType), []string{"client-cert", "upstream-ca"}, "1", "s1")
	wantRequest(t, byType(t, reqs, resourcev3.ListenerType), nil, "", "")

	x.respond(t, resourcev3.ListenerType, "1", "l1", listener(t, nil))
	reqs = x.next(t, 3) // RDS, SDS with the listener's secret added, then the LDS ACK
	wantTypes(t, reqs, resourcev3.RouteType, resourcev3.SecretType, resourcev3.ListenerType)
	wantRequest(t, reqs[0], []string{"routes"}, "", "")
	wantRequest(t, reqs[1], []string{"client-cert", "front-cert", "upstream-ca"}, "1", "s1")
	wantRequest(t, reqs[2], nil, "1", "l1")

	x.respond(t, resourcev3.RouteType, "1", "r1", routes(routeTo("default", "a")))
	x.respond(t, resourcev3.SecretType, "2", "s2", certSecret("front-cert", frontCert, frontKey, ""))
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(s.dp.Close)
	f := &front{t: t, pki: pki, dp: s.dp}
	if code, body := get(t, f.client(false), f.url("/")); code != 200 || body != "a" {
		t.Fatalf("through the front: %d %q, want 200 from the mTLS upstream", code, body)
	}
}
