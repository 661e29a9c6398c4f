package envoyconf

import (
	"net"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Extension names: the key of a cluster's upstream HTTP options and the TLS transport socket.
const (
	HTTPProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	TransportTLS           = "envoy.transport_sockets.tls"
)

// GRPCCreds names the SDS secrets of a gRPC cluster's mTLS: the client certificate it presents and
// the CA that verifies the server.
type GRPCCreds struct {
	Cert, CA *tlsv3.SdsSecretConfig
}

// GRPCCluster is an HTTP/2 cluster of one gRPC endpoint, host:port or unix:///path, with mTLS when
// creds is set (the peer verified for sni, default the host).
func GRPCCluster(name, addr, sni string, creds *GRPCCreds) (*clusterv3.Cluster, error) {
	protoAny, err := Pack(&httpv3.HttpProtocolOptions{
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
		TypedExtensionProtocolOptions: map[string]*anypb.Any{HTTPProtocolOptionsKey: protoAny},
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint(&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}})},
		}}}
	} else {
		la, typ, err := loadAssignment(name, addr)
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

// mtlsSocket is a TLS transport socket that presents creds.Cert and verifies the peer's chain
// against creds.CA and its name (Envoy checks the chain but not the name unless told to:
// match_typed_subject_alt_names).
func mtlsSocket(sni string, creds *GRPCCreds, minVersion tlsv3.TlsParameters_TlsProtocol, alpn string) (*corev3.TransportSocket, error) {
	tlsAny, err := Pack(&tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: minVersion},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{creds.Cert},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: sanType(sni),
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: sni}},
				}}},
				ValidationContextSdsSecretConfig: creds.CA,
			}},
			AlpnProtocols: []string{alpn},
		},
	})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: TransportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}, nil
}

func sanType(name string) tlsv3.SubjectAltNameMatcher_SanType {
	if isIP(name) {
		return tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return tlsv3.SubjectAltNameMatcher_DNS
}
