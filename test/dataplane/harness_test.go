package dataplane

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

const testNode = "test-node"

// xdsServer is an in-test go-control-plane ADS server serving one node's snapshot.
type xdsServer struct {
	addr    string
	cache   cachev3.SnapshotCache
	version int
	mu      sync.Mutex
	nodes   []*corev3.Node // node of every request that carried one
	types   []string       // type URL of every request, in order
}

func startXDS(t *testing.T) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			x.record(r.Node, r.TypeUrl)
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			x.record(r.Node, r.TypeUrl)
			return nil
		},
	}
	srv := serverv3.NewServer(context.Background(), x.cache, cb)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = lis.Addr().String()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return x
}

func (x *xdsServer) record(n *corev3.Node, typeURL string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n != nil {
		x.nodes = append(x.nodes, n)
	}
	x.types = append(x.types, typeURL)
}

// asked reports whether a request for the type arrived.
func (x *xdsServer) asked(typeURL string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Contains(x.types, typeURL)
}

// set publishes a new snapshot version with these resources.
func (x *xdsServer) set(t *testing.T, res ...types.Resource) {
	t.Helper()
	x.version++
	m := map[resourcev3.Type][]types.Resource{}
	for _, r := range res {
		var typ string
		switch r.(type) {
		case *clusterv3.Cluster:
			typ = resourcev3.ClusterType
		case *listenerv3.Listener:
			typ = resourcev3.ListenerType
		case *routev3.RouteConfiguration:
			typ = resourcev3.RouteType
		case *tlsv3.Secret:
			typ = resourcev3.SecretType
		}
		m[typ] = append(m[typ], r)
	}
	snap, err := cachev3.NewSnapshot(strconv.Itoa(x.version), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), testNode, snap); err != nil {
		t.Fatal(err)
	}
}

func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
}

func sdsRef(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: ads()}
}

// certSecret is an SDS tls_certificate secret with file paths (and a watched directory if set).
func certSecret(name, cert, key, watched string) *tlsv3.Secret {
	tc := &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: cert}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: key}},
	}
	if watched != "" {
		tc.WatchedDirectory = &corev3.WatchedDirectory{Path: watched}
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: tc}}
}

func caSecret(name, ca string) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca}}}}}
}

// listener builds the front listener: TLS with the SDS secret "front-cert", the HCM with routes
// "routes" over ADS and the given filters (the router is appended).
func listener(t testing.TB, mutate func(*hcmv3.HttpConnectionManager), filters ...*hcmv3.HttpFilter) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:     "test",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: "routes"}},
		HttpFilters: append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &routerv3.Router{})}}),
	}
	if mutate != nil {
		mutate(hcm)
	}
	tls := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:                  []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsRef("front-cert")},
	}}
	return &listenerv3.Listener{
		Name: "front",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0}}}},
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: anyOf(t, hcm)}}},
			TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, tls)}},
		}},
	}
}

func httpFilter(t testing.TB, name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, cfg)}}
}

// plainCluster is a STATIC HTTP/1.1 plaintext cluster over the addresses, least-request, panic
// threshold 0.
func plainCluster(name string, addrs ...string) *clusterv3.Cluster {
	var eps []*endpointv3.LbEndpoint
	for _, a := range addrs {
		h, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		eps = append(eps, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: h, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}}}})
	}
	return &clusterv3.Cluster{
		Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout: durationpb.New(time.Second), LbPolicy: clusterv3.Cluster_LEAST_REQUEST,
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{}},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}},
	}
}

// front is a data plane under test with its xDS server, PKI and a client for it.
type front struct {
	t   *testing.T
	x   *xdsServer
	pki *testPKI
	dp  *DataPlane
	// base are the resources every snapshot carries: the listener's secret.
	base []types.Resource
}

// startFront serves res (plus the front certificate) and starts a data plane on them.
func startFront(t *testing.T, proto Protocol, res ...types.Resource) *front {
	t.Helper()
	return startFrontBootstrap(t, proto, nil, res...)
}

// startFrontBootstrap is startFront for a data plane started with bootstrap b.
func startFrontBootstrap(t *testing.T, proto Protocol, b *bootstrapv3.Bootstrap, res ...types.Resource) *front {
	t.Helper()
	return startFrontWith(t, proto, func(c *Config) { c.Bootstrap = b }, res...)
}

// startFrontWith is startFront for a data plane whose Config set changes (Bootstrap, EnvoyVersion).
func startFrontWith(t *testing.T, proto Protocol, set func(*Config), res ...types.Resource) *front {
	t.Helper()
	f := &front{t: t, x: startXDS(t), pki: newPKI(t)}
	cert, key, _ := f.pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
	f.base = []types.Resource{certSecret("front-cert", cert, key, "")}
	f.x.set(t, append(res, f.base...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{XDSAddress: f.x.addr, NodeID: testNode, Protocol: proto, Seed: 42, Logf: t.Logf}
	set(&cfg)
	dp, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	f.dp = dp
	return f
}

// update publishes res (plus the front certificate) as the next snapshot.
func (f *front) update(res ...types.Resource) { f.x.set(f.t, append(res, f.base...)...) }

// client speaks to the front over TLS; h2 selects HTTP/2.
func (f *front) client(h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pki.pool, ServerName: "front"}}
	p := new(http.Protocols)
	if h2 {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr.Protocols = p
	f.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// url is the front's URL for path.
func (f *front) url(path string) string { return "https://" + f.dp.Addr() + path }

// waitActive waits until the cluster is warmed and active.
func (f *front) waitActive(name string) *cluster {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c := f.dp.clusters.get(name); c != nil {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("cluster %s never became active", name)
	return nil
}
