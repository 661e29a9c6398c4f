package xds

import (
	"fmt"
	"net"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/internal/wire"
)

const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// clusterKind selects which of a cluster's twins apiserverCluster builds.
type clusterKind int

const (
	// kindH2 carries requests over HTTP/2 with the front-proxy certificate: thousands of watches
	// multiplex over a few connections.
	kindH2 clusterKind = iota
	// kindHTTP1 is the HTTP/1.1 twin (wire.HTTP1Cluster) that carries upgrades.
	kindHTTP1
	// kindAnon is the anonymous twin (wire.AnonCluster): HTTP/2 without a client certificate.
	kindAnon
)

var clusterKinds = []clusterKind{kindH2, kindHTTP1, kindAnon}

// healthCheckMatch selects the transport socket of the anonymous twins' health checks: Envoy's HTTP
// health checker opens its connections with HostImpl::createHealthCheckConnection, which resolves the
// transport socket from HealthCheck.transport_socket_match_criteria against
// Cluster.transport_socket_matches (source/common/upstream/upstream_impl.cc, and
// source/extensions/health_checkers/http/health_checker_impl.cc passing
// transportSocketMatchMetadata()). Traffic connections carry the endpoint metadata, which has no
// such key, so they get the cluster's own transport socket (TransportSocketMatcherImpl::resolve in
// source/common/upstream/transport_socket_match_impl.cc: a non-empty match never matches absent
// metadata; read in 2026 main copies, unchanged for this by the 1.37.0-1.40.0 changelogs:
// test/dataplane/CONFORMANCE.md row 18).
const (
	healthCheckMatchKey   = "skewgate"
	healthCheckMatchValue = "health-check"
)

// apiserverCluster is a cluster of apiservers at addrs (host:port) of the given kind.
func (tb *translator) apiserverCluster(name string, addrs []string, kind clusterKind) (*clusterv3.Cluster, error) {
	alpn, codec := "h2", typev3.CodecClientType_HTTP2
	h1 := kind == kindHTTP1
	var err error
	proto := &httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Hour)},
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
				// kube-apiserver's default --http2-max-streams-per-connection.
				MaxConcurrentStreams: wrapperspb.UInt32(1000),
				ConnectionKeepalive:  &corev3.KeepaliveSettings{Interval: durationpb.New(30 * time.Second), Timeout: durationpb.New(10 * time.Second)},
			}},
		}},
	}
	if proto.HttpFilters, err = apiserverUpstreamFilters(); err != nil {
		return nil, err
	}
	if h1 {
		name = wire.HTTP1Cluster(name)
		alpn, codec = "http/1.1", typev3.CodecClientType_HTTP1
		proto.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	}
	protoAny, err := tb.packOnce(proto)
	if err != nil {
		return nil, err
	}
	if kind == kindAnon {
		name = wire.AnonCluster(name)
	}
	// Every twin verifies the apiserver; only the anonymous one presents no certificate, so the
	// apiserver applies its own anonymous policy (--anonymous-auth, AuthenticationConfiguration).
	ts, err := tb.apiserverSocket(alpn, kind != kindAnon)
	if err != nil {
		return nil, err
	}
	la, discoveryType, err := loadAssignment(name, addrs)
	if err != nil {
		return nil, err
	}
	iv := tb.o.HealthCheckInterval
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discoveryType},
		ConnectTimeout:       durationpb.New(2 * time.Second),
		// Watches are long; balance by requests in flight, not by turns.
		LbPolicy:                      clusterv3.Cluster_LEAST_REQUEST,
		LoadAssignment:                la,
		TransportSocket:               ts,
		TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsKey: protoAny},
		HealthChecks: []*corev3.HealthCheck{{
			Timeout:            durationpb.New(iv),
			Interval:           durationpb.New(iv),
			NoTrafficInterval:  durationpb.New(iv), // set clusters may be idle; keep them fresh anyway
			UnhealthyThreshold: wrapperspb.UInt32(2),
			HealthyThreshold:   wrapperspb.UInt32(1),
			HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{
				Host: wire.UpstreamSNI, Path: "/readyz", CodecClientType: codec,
				RequestHeadersToAdd: []*corev3.HeaderValueOption{{
					Header:       &corev3.HeaderValue{Key: wire.RemoteUserHeader, Value: wire.HealthCheckUser},
					AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
				}},
			}},
		}},
		// No outlier_detection: the active /readyz checks above alone decide which apiserver is in.
		// Envoy's detector counts what clients can cause on purpose. A response code goes to
		// putHttpResponseCode in every mode (router.cc, Filter::onUpstreamHeaders), so an
		// apiserver's own 502/503/504 are gateway failures (outlier_detection_impl.cc,
		// isGatewayError), and an apiserver answers those on demand: 503 for a group whose
		// aggregated APIService is unavailable, 504 for a request past its ?timeout=. With
		// split_external_local_origin_errors the local-origin counter is no safer: every upstream
		// reset, one the apiserver sent over the wire included, is reported as
		// LOCAL_ORIGIN_CONNECT_FAILED (router.cc, Filter::onUpstreamReset: "The reset may also come
		// from upstream over the wire"), and an apiserver resets a stream on demand: a request whose
		// ?timeout= passes after the response started is aborted with http.ErrAbortHandler, an
		// HTTP/2 RST_STREAM (k8s.io/apiserver pkg/server/filters/timeout.go, baseTimeoutWriter.timeout),
		// as is a proxied or aggregated response whose backend, which a user may run, breaks off
		// (on the testbed 22 to 38 of 100 lists with ?timeout=1ms ended so: TestGatewayAnswersEjectNobody).
		// With panic threshold 0 an ejected apiserver serves nobody, so any enforced counter lets one
		// client empty the front. A dead apiserver is still taken out by the checks (connection
		// failures: unhealthy_threshold in a row) and, meanwhile, skipped by connect-failure retries.
		// Read at envoyproxy/envoy: outlier_detection_impl.cc at 00c7146d95 (a recent main copy, with
		// extension monitors), router.cc at 001b1c0cd4, upstream_request.cc (onPoolReady reports
		// LOCAL_ORIGIN_CONNECT_SUCCESS) in a 2026 main copy; no copy at the 1.37.6..1.40.0 tags could
		// be read, and their changelogs change none of this (test/dataplane/CONFORMANCE.md row 19);
		// the router's reporting is the same in every copy of router.cc read.
		// Sized for thousands of long-lived watches per upstream.
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     wrapperspb.UInt32(100000),
			MaxPendingRequests: wrapperspb.UInt32(10000),
			MaxRequests:        wrapperspb.UInt32(100000),
			MaxRetries:         wrapperspb.UInt32(100),
		}}},
		// Never send to hosts known to be unhealthy, even when most are: a dead or incapable apiserver
		// answers nothing useful, while Envoy's 503 tells the client to retry.
		CommonLbConfig:            &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
		IgnoreHealthOnHostRemoval: true,
		UpstreamConnectionOptions: &clusterv3.UpstreamConnectionOptions{TcpKeepalive: &corev3.TcpKeepalive{
			KeepaliveTime: wrapperspb.UInt32(30), KeepaliveInterval: wrapperspb.UInt32(10), KeepaliveProbes: wrapperspb.UInt32(3),
		}},
	}
	if kind == kindAnon {
		// The /readyz check must still authenticate (an apiserver with --anonymous-auth=false answers
		// it 401): it presents the front-proxy certificate with the health-check user, like the other
		// twins' checks.
		withCert, err := tb.apiserverSocket(alpn, true)
		if err != nil {
			return nil, err
		}
		c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{{
			Name:            "health-check",
			Match:           healthCheckCriteria(),
			TransportSocket: withCert,
		}}
		c.HealthChecks[0].TransportSocketMatchCriteria = healthCheckCriteria()
	}
	return c, nil
}

func healthCheckCriteria() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{healthCheckMatchKey: structpb.NewStringValue(healthCheckMatchValue)}}
}

// extProcCluster is the gRPC cluster of the ext_proc service; its mTLS pair and CA arrive over SDS.
func (tb *translator) extProcCluster() (*clusterv3.Cluster, error) {
	var creds *grpcCreds
	if tb.o.ExtProcCAFile != "" {
		creds = &grpcCreds{cert: sdsRef(SecretExtProcCert), ca: sdsRef(SecretExtProcCA)}
	}
	c, err := grpcCluster(wire.ExtProcCluster, tb.o.ExtProcAddress, tb.o.ExtProcSNI, creds)
	if err != nil {
		return nil, err
	}
	// One stream per request, and with Envoy < 1.37 one per open watch.
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     wrapperspb.UInt32(1024),
		MaxPendingRequests: wrapperspb.UInt32(10000),
		MaxRequests:        wrapperspb.UInt32(1000000),
	}}}
	return c, nil
}

// grpcCreds names the SDS secrets of a gRPC cluster's mTLS: the client certificate it presents and
// the CA that verifies the server.
type grpcCreds struct {
	cert, ca *tlsv3.SdsSecretConfig
}

// grpcCluster is an HTTP/2 cluster of one gRPC endpoint, host:port or unix:///path, with mTLS when
// creds is set (the peer verified for sni, default the host).
func grpcCluster(name, addr, sni string, creds *grpcCreds) (*clusterv3.Cluster, error) {
	protoAny, err := pack(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
				ConnectionKeepalive: &corev3.KeepaliveSettings{Interval: durationpb.New(30 * time.Second), Timeout: durationpb.New(5 * time.Second)},
			}},
		}},
	})
	if err != nil {
		return nil, err
	}
	c := &clusterv3.Cluster{
		Name:                          name,
		ConnectTimeout:                durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsKey: protoAny},
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint(&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}})},
		}}}
	} else {
		la, typ, err := loadAssignment(name, []string{addr})
		if err != nil {
			return nil, err
		}
		c.ClusterDiscoveryType, c.LoadAssignment = &clusterv3.Cluster_Type{Type: typ}, la
	}
	if creds != nil {
		if sni == "" {
			sni, _, _ = net.SplitHostPort(addr)
		}
		if c.TransportSocket, err = mtlsSocket(sni, creds, tlsv3.TlsParameters_TLSv1_3, "h2"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// mtlsSocket is a TLS transport socket that presents creds.cert and verifies the peer's chain
// against creds.ca and its name (Envoy checks the chain but not the name unless told to:
// match_typed_subject_alt_names).
func mtlsSocket(sni string, creds *grpcCreds, minVersion tlsv3.TlsParameters_TlsProtocol, alpn string) (*corev3.TransportSocket, error) {
	tlsAny, err := pack(&tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: minVersion},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{creds.cert},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: sanType(sni),
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: sni}},
				}}},
				ValidationContextSdsSecretConfig: creds.ca,
			}},
			AlpnProtocols: []string{alpn},
		},
	})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: transportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}, nil
}

func sanType(name string) tlsv3.SubjectAltNameMatcher_SanType {
	if isIP(name) {
		return tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return tlsv3.SubjectAltNameMatcher_DNS
}

// loadAssignment lists addrs (host:port) as endpoints. IP literals make a STATIC cluster; any
// hostname makes the cluster STRICT_DNS, which resolves every endpoint.
func loadAssignment(cluster string, addrs []string) (*endpointv3.ClusterLoadAssignment, clusterv3.Cluster_DiscoveryType, error) {
	typ := clusterv3.Cluster_STATIC
	eps := make([]*endpointv3.LbEndpoint, 0, len(addrs))
	for _, a := range addrs {
		host, port, err := splitHostPort(a)
		if err != nil {
			return nil, 0, fmt.Errorf("cluster %s: address %q: %v", cluster, a, err)
		}
		if !isIP(host) {
			typ = clusterv3.Cluster_STRICT_DNS
		}
		eps = append(eps, lbEndpoint(socketAddress(host, port)))
	}
	la := &endpointv3.ClusterLoadAssignment{ClusterName: cluster}
	if len(eps) > 0 {
		la.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}
	}
	return la, typ, nil
}

func lbEndpoint(addr *corev3.Address) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}
}
