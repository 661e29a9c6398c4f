package xds

import (
	"fmt"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

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
	numClusterKinds
)

var clusterKinds = []clusterKind{kindH2, kindHTTP1, kindAnon}

// name is the name of base's twin of kind k.
func (k clusterKind) name(base string) string {
	switch k {
	case kindHTTP1:
		return wire.HTTP1Cluster(base)
	case kindAnon:
		return wire.AnonCluster(base)
	}
	return base
}

// protocol is the ALPN and the health checks' codec of kind k: HTTP/1.1 for the upgrade twin,
// HTTP/2 for the others.
func (k clusterKind) protocol() (alpn string, codec typev3.CodecClientType) {
	if k == kindHTTP1 {
		return "http/1.1", typev3.CodecClientType_HTTP1
	}
	return "h2", typev3.CodecClientType_HTTP2
}

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

// clusters are the apiserver clusters of all upstreams (those that proved their capabilities), of
// every upstream and of every capability set, each with its twins, and the ext_proc cluster, sorted
// by name.
func (tb *translator) clusters(t *discovery.Topology) ([]*clusterv3.Cluster, error) {
	tb.upstreams = make(map[string]*upstreamEndpoint, len(t.Upstreams))
	all := make([]string, 0, len(t.Upstreams))
	for _, u := range t.Upstreams {
		tb.upstreams[u.Name] = &upstreamEndpoint{addr: u.Address}
		// Only upstreams whose discovery was fetched over verified TLS take default traffic: an
		// address from a Lease that never proved to be an apiserver gets none.
		if u.Capabilities {
			all = append(all, u.Name)
		}
	}
	out := make([]*clusterv3.Cluster, 0, len(clusterKinds)*(1+len(t.Upstreams)+len(t.Sets))+1)
	out, err := tb.twins(out, wire.AllCluster, all)
	if err != nil {
		return nil, err
	}
	for _, u := range t.Upstreams {
		if out, err = tb.twins(out, wire.UpstreamCluster(u.Name), []string{u.Name}); err != nil {
			return nil, err
		}
	}
	for _, s := range t.Sets {
		if out, err = tb.twins(out, wire.SetCluster(s.Members), s.Members); err != nil {
			return nil, err
		}
	}
	ep, err := tb.extProcCluster()
	if err != nil {
		return nil, err
	}
	out = append(out, ep)
	slices.SortFunc(out, func(a, b *clusterv3.Cluster) int { return cmpString(a.Name, b.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("duplicate cluster %q", out[i].Name)
		}
	}
	return out, nil
}

// twins appends the cluster name of the upstreams names and its twins to out.
func (tb *translator) twins(out []*clusterv3.Cluster, name string, names []string) ([]*clusterv3.Cluster, error) {
	m, err := tb.members(name, names)
	if err != nil {
		return nil, err
	}
	for _, kind := range clusterKinds {
		c, err := tb.apiserverCluster(name, m, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// apiserverShape is what every apiserver cluster of one kind has in common. It is built, validated
// and packed once per translation and shared by pointer among the clusters: nothing modifies a
// resource after Translate returns, and go-control-plane only marshals and hashes them, which is
// safe from many goroutines at once (pkg/cache/v3/cached_resource.go at v0.14.0: "resource must not
// be modified once the cachedResource is created"). A cluster differs from its neighbours only in
// name and endpoints; TestSharedMessagesStayIntact checks all this under -race.
type apiserverShape struct {
	connectTimeout  *durationpb.Duration
	protocolOptions map[string]*anypb.Any // typed_extension_protocol_options
	transportSocket *corev3.TransportSocket
	socketMatches   []*clusterv3.Cluster_TransportSocketMatch
	healthChecks    []*corev3.HealthCheck
	circuitBreakers *clusterv3.CircuitBreakers
	commonLb        *clusterv3.Cluster_CommonLbConfig
	connOptions     *clusterv3.UpstreamConnectionOptions
}

// apiserverCluster is base's twin of the given kind, a cluster of the apiservers m.
func (tb *translator) apiserverCluster(base string, m members, kind clusterKind) (*clusterv3.Cluster, error) {
	s, err := tb.shape(kind)
	if err != nil {
		return nil, err
	}
	name := kind.name(base)
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: m.typ,
		ConnectTimeout:       s.connectTimeout,
		// Watches are long; balance by requests in flight, not by turns.
		LbPolicy:                      clusterv3.Cluster_LEAST_REQUEST,
		LoadAssignment:                m.loadAssignment(name),
		TransportSocket:               s.transportSocket,
		TransportSocketMatches:        s.socketMatches,
		TypedExtensionProtocolOptions: s.protocolOptions,
		HealthChecks:                  s.healthChecks,
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
		CircuitBreakers:           s.circuitBreakers,
		CommonLbConfig:            s.commonLb,
		IgnoreHealthOnHostRemoval: true,
		UpstreamConnectionOptions: s.connOptions,
	}, nil
}

// shape is the apiserverShape of kind, built on first use.
func (tb *translator) shape(kind clusterKind) (*apiserverShape, error) {
	if s := tb.shapes[kind]; s != nil {
		return s, nil
	}
	s, err := tb.newShape(kind)
	if err != nil {
		return nil, err
	}
	tb.shapes[kind] = s
	return s, nil
}

func (tb *translator) newShape(kind clusterKind) (*apiserverShape, error) {
	alpn, codec := kind.protocol()
	opts, err := apiserverProtocolOptions(kind)
	if err != nil {
		return nil, err
	}
	// Every twin verifies the apiserver; only the anonymous one presents no certificate, so the
	// apiserver applies its own anonymous policy (--anonymous-auth, AuthenticationConfiguration).
	ts, err := tb.apiserverSocket(alpn, kind != kindAnon)
	if err != nil {
		return nil, err
	}
	hc := apiserverHealthCheck(tb.o.HealthCheckInterval, codec)
	s := &apiserverShape{
		connectTimeout:  durationpb.New(2 * time.Second),
		protocolOptions: map[string]*anypb.Any{envoyconf.HTTPProtocolOptionsKey: opts},
		transportSocket: ts,
		healthChecks:    []*corev3.HealthCheck{hc},
		// Sized for thousands of long-lived watches per upstream.
		circuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     wrapperspb.UInt32(100000),
			MaxPendingRequests: wrapperspb.UInt32(10000),
			MaxRequests:        wrapperspb.UInt32(100000),
			MaxRetries:         wrapperspb.UInt32(100),
		}}},
		// Never send to hosts known to be unhealthy, even when most are: a dead or incapable apiserver
		// answers nothing useful, while Envoy's 503 tells the client to retry.
		commonLb: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
		connOptions: &clusterv3.UpstreamConnectionOptions{TcpKeepalive: &corev3.TcpKeepalive{
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
		s.socketMatches = []*clusterv3.Cluster_TransportSocketMatch{{
			Name:            "health-check",
			Match:           healthCheckCriteria(),
			TransportSocket: withCert,
		}}
		hc.TransportSocketMatchCriteria = healthCheckCriteria()
	}
	return s, nil
}

// apiserverProtocolOptions are the upstream HTTP options of kind's clusters, packed: HTTP/1.1 for
// the upgrade twin, HTTP/2 sized like kube-apiserver for the others, and the upstream filters.
func apiserverProtocolOptions(kind clusterKind) (*anypb.Any, error) {
	var protocol httpv3.HttpProtocolOptions_ExplicitHttpConfig
	if kind == kindHTTP1 {
		protocol.ProtocolConfig = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}
	} else {
		protocol.ProtocolConfig = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
			// kube-apiserver's default --http2-max-streams-per-connection.
			MaxConcurrentStreams: wrapperspb.UInt32(1000),
			ConnectionKeepalive:  &corev3.KeepaliveSettings{Interval: durationpb.New(30 * time.Second), Timeout: durationpb.New(10 * time.Second)},
		}}
	}
	filters, err := apiserverUpstreamFilters()
	if err != nil {
		return nil, err
	}
	return envoyconf.Pack(&httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Hour)},
		UpstreamProtocolOptions:   &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &protocol},
		HttpFilters:               filters,
	})
}

// apiserverHealthCheck probes /readyz every interval, as the health-check user over codec.
func apiserverHealthCheck(interval time.Duration, codec typev3.CodecClientType) *corev3.HealthCheck {
	return &corev3.HealthCheck{
		Timeout:            durationpb.New(interval),
		Interval:           durationpb.New(interval),
		NoTrafficInterval:  durationpb.New(interval), // set clusters may be idle; keep them fresh anyway
		UnhealthyThreshold: wrapperspb.UInt32(2),
		HealthyThreshold:   wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{
			Host: wire.UpstreamSNI, Path: "/readyz", CodecClientType: codec,
			RequestHeadersToAdd: []*corev3.HeaderValueOption{{
				Header:       &corev3.HeaderValue{Key: wire.RemoteUserHeader, Value: wire.HealthCheckUser},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}},
		}},
	}
}

func healthCheckCriteria() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{healthCheckMatchKey: structpb.NewStringValue(healthCheckMatchValue)}}
}
