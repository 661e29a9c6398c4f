package dataplane

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// upstreamTLSSocket verifies the apiserver (CA over SDS, SAN kubernetes.default.svc) and presents
// the SDS certificate clientCert if set.
func upstreamTLSSocket(t *testing.T, clientCert string) *corev3.TransportSocket {
	ctx := &tlsv3.UpstreamTlsContext{Sni: "kubernetes.default.svc", CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "kubernetes.default.svc"}}}}},
			ValidationContextSdsSecretConfig: sdsRef("upstream-ca"),
		}},
	}}
	if clientCert != "" {
		ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsRef(clientCert)}
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, ctx)}}
}

// TestHealthCheckTransportSocketMatch: the cluster's transport_socket presents no client
// certificate; a transport_socket_matches entry does; the health check's
// transport_socket_match_criteria selects that entry, so /readyz authenticates while requests go
// out without a certificate. Without the criteria the check uses the request socket and fails.
func TestHealthCheckTransportSocketMatch(t *testing.T) {
	for _, withCriteria := range []bool{true, false} {
		t.Run(map[bool]string{true: "criteria", false: "no criteria"}[withCriteria], func(t *testing.T) {
			f := startFront(t, Delta, listener(t, nil), routes(routeTo("default", "none")), plainCluster("none", "127.0.0.1:1"))
			var requestsWithCert, requests atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hasCert := len(r.TLS.PeerCertificates) > 0
				if r.URL.Path == "/readyz" {
					if !hasCert {
						w.WriteHeader(http.StatusUnauthorized)
					}
					return
				}
				requests.Add(1)
				if hasCert {
					requestsWithCert.Add(1)
				}
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{f.pki.tlsPair(t, "apiserver", []string{"kubernetes.default.svc"}, false)},
				ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: f.pki.pool}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			cert, key, _ := f.pki.issueFiles(t, filepath.Join(t.TempDir(), "fp"), "front-proxy", nil, true)
			c := plainCluster("api", strings.TrimPrefix(srv.URL, "https://"))
			c.TransportSocket = upstreamTLSSocket(t, "")
			c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{{Name: "front-proxy",
				Match:           &structpb.Struct{Fields: map[string]*structpb.Value{"health-check": structpb.NewBoolValue(true)}},
				TransportSocket: upstreamTLSSocket(t, "front-proxy-cert")}}
			hc := &corev3.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(100 * time.Millisecond),
				UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
				HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/readyz", Host: "kubernetes.default.svc"}}}
			if withCriteria {
				hc.TransportSocketMatchCriteria = &structpb.Struct{Fields: map[string]*structpb.Value{"health-check": structpb.NewBoolValue(true)}}
			}
			c.HealthChecks = []*corev3.HealthCheck{hc}
			f.update(listener(t, nil), routes(routeTo("default", "api")), c,
				caSecret("upstream-ca", f.pki.caFile), certSecret("front-proxy-cert", cert, key, ""))
			f.waitActive("api")
			code, _ := get(t, f.client(false), f.url("/api"))
			if withCriteria && (code != 200 || requests.Load() != 1 || requestsWithCert.Load() != 0) {
				t.Errorf("%d, %d requests of which %d with a client certificate; want 200 from one request without", code, requests.Load(), requestsWithCert.Load())
			}
			if !withCriteria && (code != http.StatusServiceUnavailable || requests.Load() != 0) {
				t.Errorf("%d with %d upstream requests; want 503 (no healthy host) and none", code, requests.Load())
			}
		})
	}
}
