package envoyconf

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Validator is what every generated Envoy message implements (protoc-gen-validate).
type Validator interface {
	proto.Message
	ValidateAll() error
}

// Pack validates m and packs it into an Any: go-control-plane's snapshot validation (Consistent) only
// checks that EDS and RDS names resolve and never unpacks a typed config, so an invalid one would
// otherwise reach Envoy and be NACKed. It packs deterministically (map entries in key order), so an
// unchanged config packs to the same bytes and the server sees an unchanged translation as one.
func Pack(m Validator) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// File is a data source read from the file at path (by Envoy, on its host).
func File(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

// SocketAddress is the TCP address host:port.
func SocketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func isIP(host string) bool { return net.ParseIP(host) != nil }

// ADSSource points a dynamic resource at the ADS stream.
func ADSSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// Endpoint is the endpoint of addr (host:port); dns reports a hostname.
func Endpoint(addr string) (ep *endpointv3.LbEndpoint, dns bool, err error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, false, err
	}
	return lbEndpoint(SocketAddress(host, port)), !isIP(host), nil
}

// loadAssignment lists one address (host:port) as the endpoint of cluster: STATIC for an IP literal,
// STRICT_DNS for a hostname.
func loadAssignment(cluster, addr string) (*endpointv3.ClusterLoadAssignment, clusterv3.Cluster_DiscoveryType, error) {
	ep, dns, err := Endpoint(addr)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster %s: address %q: %v", cluster, addr, err)
	}
	typ := clusterv3.Cluster_STATIC
	if dns {
		typ = clusterv3.Cluster_STRICT_DNS
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{ep},
	}}}, typ, nil
}

func lbEndpoint(addr *corev3.Address) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("want host:port")
	}
	return host, uint32(p), nil
}

// CertSecret is a TlsCertificate secret of the files chain and key, watched in chain's directory
// (xds and serve/options refuse a key outside that directory).
func CertSecret(name, chain, key string) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: File(chain), PrivateKey: File(key),
		WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(chain)},
	}}}
}

// CASecret is a CertificateValidationContext secret of the CA bundle at path, watched in its
// directory.
func CASecret(name, path string) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa:        File(path),
		WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(path)},
	}}}
}
