package xds

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

func translated(t *testing.T) *Resources {
	t.Helper()
	rs, err := Translate(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func hcmOf(t *testing.T, rs *Resources) *hcmv3.HttpConnectionManager {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	if err := rs.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	return &hcm
}

// TestRoutingHeaderNeverFromClient: the connection manager removes x-skewgate-cluster before route
// selection for every peer, and routes take only apiserver cluster names from it.
func TestRoutingHeaderNeverFromClient(t *testing.T) {
	rs := translated(t)
	rc := rs.Routes[0]
	if !slices.Equal(rc.InternalOnlyHeaders, []string{wire.RouteHeader}) {
		t.Errorf("internal_only_headers = %v", rc.InternalOnlyHeaders)
	}
	iac := hcmOf(t, rs).GetInternalAddressConfig()
	if iac == nil || iac.UnixSockets || len(iac.CidrRanges) == 0 {
		t.Fatalf("internal_address_config %v: an empty cidr_ranges falls back to Envoy's default (RFC1918, fd00::/8 and loopback)", iac)
	}
	for _, r := range iac.CidrRanges {
		if r.GetPrefixLen().GetValue() != 32 && r.GetPrefixLen().GetValue() != 128 || (r.AddressPrefix != "0.0.0.0" && r.AddressPrefix != "::") {
			t.Errorf("internal cidr %s/%d could match a peer", r.AddressPrefix, r.GetPrefixLen().GetValue())
		}
	}

	re := regexp.MustCompile(`^(?:` + wire.RoutedClusterPattern + `)$`)
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			if r.GetRoute().GetClusterHeader() == "" {
				continue
			}
			var hm *routev3.HeaderMatcher
			for _, h := range r.Match.Headers {
				if h.Name == wire.RouteHeader {
					hm = h
				}
			}
			if hm.GetStringMatch().GetSafeRegex().GetRegex() != wire.RoutedClusterPattern {
				t.Errorf("route %s takes %s without matching %s: %v", r.Name, wire.RouteHeader, wire.RoutedClusterPattern, hm)
			}
		}
	}
	for _, c := range rs.ClusterNames() {
		grpc := c == wire.ExtProcCluster || c == wire.XDSCluster
		if re.MatchString(c) == grpc {
			t.Errorf("cluster %s: routable = %v", c, !grpc)
		}
	}
	if re.MatchString(wire.XDSCluster) || re.MatchString(wire.AllCluster+":http1x") {
		t.Error("the pattern matches more than apiserver clusters")
	}
}

// TestXFCCRemovedByRouter: the route configuration removes X-Forwarded-Client-Cert (and the identity
// refusal marker) when forwarding; the only filters after ext_proc are the Lua refusal filter, which
// never clears the route cache (identityfilter_test.go), and the router.
func TestXFCCRemovedByRouter(t *testing.T) {
	rs := translated(t)
	if !slices.Equal(rs.Routes[0].RequestHeadersToRemove, []string{wire.ForwardedCertHeader, wire.IdentityRefusedHeader}) {
		t.Errorf("request_headers_to_remove = %v", rs.Routes[0].RequestHeadersToRemove)
	}
	hcm := hcmOf(t, rs)
	var names []string
	for _, f := range hcm.HttpFilters {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{filterHeaderMutation + ".strip", filterLua + ".identity", filterExtProc, filterLua + ".refusal", filterRouter}) {
		t.Errorf("filters %v", names)
	}
	var ep extprocv3.ExternalProcessor
	if err := hcm.HttpFilters[2].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	if !ep.AllowModeOverride || !ep.FailureModeAllow {
		t.Errorf("ext_proc allow_mode_override %v failure_mode_allow %v", ep.AllowModeOverride, ep.FailureModeAllow)
	}
}

// TestAnonymousRoutes: requests without credentials default to the anonymous twin of all, except
// upgrades, which ride the HTTP/1.1 twin.
func TestAnonymousRoutes(t *testing.T) {
	rs := translated(t)
	want := map[string]string{
		"anonymous-default": wire.AnonCluster(wire.AllCluster),
		"anonymous-upgrade": wire.HTTP1Cluster(wire.AllCluster),
		"default":           wire.AllCluster,
		"upgrade":           wire.HTTP1Cluster(wire.AllCluster),
	}
	seen := 0
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		if c, ok := want[r.Name]; ok {
			seen++
			if r.GetRoute().GetCluster() != c {
				t.Errorf("route %s goes to %q, want %q", r.Name, r.GetRoute().GetCluster(), c)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the routes %v", seen, want)
	}
}

// TestAnonymousClusters: every HTTP/2 apiserver cluster has an anonymous twin that verifies the
// apiserver but presents no certificate, and whose health check presents the front-proxy one.
func TestAnonymousClusters(t *testing.T) {
	rs := translated(t)
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range rs.Clusters {
		byName[c.Name] = c
	}
	anons := 0
	for name, c := range byName {
		if strings.HasSuffix(name, wire.HTTP1Suffix) || strings.HasSuffix(name, wire.AnonSuffix) || name == wire.ExtProcCluster {
			continue
		}
		a := byName[wire.AnonCluster(name)]
		if a == nil {
			t.Errorf("%s has no anonymous twin", name)
			continue
		}
		anons++
		var tlsCtx tlsv3.UpstreamTlsContext
		if err := a.TransportSocket.GetTypedConfig().UnmarshalTo(&tlsCtx); err != nil {
			t.Fatal(err)
		}
		if n := len(tlsCtx.CommonTlsContext.TlsCertificateSdsSecretConfigs) + len(tlsCtx.CommonTlsContext.TlsCertificates); n != 0 {
			t.Errorf("%s presents %d client certificates", a.Name, n)
		}
		if tlsCtx.Sni != wire.UpstreamSNI || tlsCtx.CommonTlsContext.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != SecretUpstreamCA {
			t.Errorf("%s does not verify the apiserver: %v", a.Name, &tlsCtx)
		}
		hc := a.HealthChecks[0]
		if len(a.TransportSocketMatches) != 1 || !proto.Equal(a.TransportSocketMatches[0].Match, hc.TransportSocketMatchCriteria) {
			t.Fatalf("%s: the health check does not select a transport socket match: %v / %v", a.Name, a.TransportSocketMatches, hc.TransportSocketMatchCriteria)
		}
		if got := secretNames(t, a.TransportSocketMatches[0].TransportSocket); !slices.Contains(got, SecretFrontProxyCert) {
			t.Errorf("%s: health checks present %v, want the front-proxy certificate", a.Name, got)
		}
		if !proto.Equal(hc.GetHttpHealthCheck(), c.HealthChecks[0].GetHttpHealthCheck()) {
			t.Errorf("%s: health check %v differs from %s's %v", a.Name, hc.GetHttpHealthCheck(), name, c.HealthChecks[0].GetHttpHealthCheck())
		}
		if len(c.TransportSocketMatches) != 0 || c.HealthChecks[0].TransportSocketMatchCriteria != nil {
			t.Errorf("%s: only anonymous twins need a health-check transport socket", name)
		}
	}
	if anons < 4 {
		t.Errorf("only %d anonymous twins", anons)
	}
}

// TestAnonymousRoutesNeverPresentTheCertificate: in a table with skew routes, every anonymous route
// with a fixed cluster goes to an :anon twin (or the :http1 twin of an upgrade), and no other route
// does: a request without credentials never rides the front-proxy certificate with the front's say.
func TestAnonymousRoutesNeverPresentTheCertificate(t *testing.T) {
	rs, err := Translate(skewedTopology(3), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	anon := 0
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		c := r.GetRoute().GetCluster()
		if c == "" {
			continue // cluster_header routes (ext_proc names the twin) and direct responses
		}
		isAnon := strings.HasPrefix(r.Name, "anonymous-")
		switch {
		case isAnon && !strings.HasSuffix(c, wire.AnonSuffix) && !strings.HasSuffix(c, wire.HTTP1Suffix):
			t.Errorf("anonymous route %s goes to %s, which presents the front-proxy certificate", r.Name, c)
		case !isAnon && strings.HasSuffix(c, wire.AnonSuffix):
			t.Errorf("route %s (credentials present) goes to the anonymous twin %s", r.Name, c)
		}
		if isAnon && strings.HasPrefix(r.Name, "anonymous-skew") {
			anon++
		}
	}
	if anon == 0 {
		t.Fatal("no anonymous skew route: the table has no skew routes to check")
	}
}

// secretNames is SecretNames for a transport socket the translator built, which must unmarshal.
func secretNames(t *testing.T, ts *corev3.TransportSocket) []string {
	t.Helper()
	names, err := SecretNames(ts)
	if err != nil {
		t.Fatalf("SecretNames: %v", err)
	}
	return names
}

// A transport socket whose typed config does not unmarshal is an error, not "no secrets": the check
// that every referenced secret is served must not pass over it.
func TestSecretNamesRefusesUndecodableSocket(t *testing.T) {
	ts := &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{
		TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", Value: []byte{0xff, 0xff}},
	}}
	names, err := SecretNames(ts)
	if err == nil || !strings.Contains(err.Error(), `transport socket "envoy.transport_sockets.tls"`) {
		t.Fatalf("SecretNames = %v, %v; want the transport socket's unmarshal error", names, err)
	}
	rs := &Resources{Clusters: []*clusterv3.Cluster{{Name: "c", TransportSocket: ts}}}
	if _, err := sdsReferences(rs); err == nil || !strings.Contains(err.Error(), "envoy.transport_sockets.tls") {
		t.Fatalf("sdsReferences error = %v, want the transport socket's unmarshal error", err)
	}
}
