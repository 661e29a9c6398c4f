package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryservice "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/skewgate/skewgate/internal/xdstest"
)

// sotwEnvoy drives one state-of-the-world ADS stream the way Envoy's SotW mux does
// (source/extensions/config_subscription/grpc/grpc_mux_impl.cc, GrpcMuxImpl): one request per type
// carrying the union of the names every watch of the type wants, the version last accepted for that
// type and the nonce last received for it. go-control-plane's sotw.ADSClient cannot name resources
// (it asks for one type, wildcard), so the stream is the generated ADS client's.
type sotwEnvoy struct {
	t        *testing.T
	s        discoveryservice.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	first    bool
	names    map[string][]string
	versions map[string]string
	nonces   map[string]string
}

func newSotWEnvoy(t *testing.T, ts *testServer) *sotwEnvoy {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sotwEnvoy{t: t, s: s, first: true, names: map[string][]string{}, versions: map[string]string{}, nonces: map[string]string{}}
}

// want (re)declares the names of a type (nil: wildcard) and sends its request.
func (e *sotwEnvoy) want(typeURL string, names []string) {
	e.t.Helper()
	e.names[typeURL] = names
	e.send(typeURL)
}

func (e *sotwEnvoy) send(typeURL string) {
	e.t.Helper()
	req := &discoveryservice.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: e.names[typeURL],
		VersionInfo: e.versions[typeURL], ResponseNonce: e.nonces[typeURL]}
	if e.first { // set_node_on_first_message_only
		req.Node, e.first = testNode, false
	}
	if err := e.s.Send(req); err != nil {
		e.t.Fatal(err)
	}
}

// await receives responses until one of each type arrived (a later one of a type replaces an
// earlier one), accepting each: the version and nonce an ACK carries are recorded, the ACK itself
// is sent by ack, after whatever requests the response made Envoy send first.
func (e *sotwEnvoy) await(within time.Duration, typeURLs ...string) map[string]*discoveryservice.DiscoveryResponse {
	e.t.Helper()
	got := map[string]*discoveryservice.DiscoveryResponse{}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for len(got) < len(typeURLs) {
		ch := make(chan *discoveryservice.DiscoveryResponse, 1)
		errc := make(chan error, 1)
		go func() {
			r, err := e.s.Recv()
			if err != nil {
				errc <- err
				return
			}
			ch <- r
		}()
		select {
		case r := <-ch:
			if !slices.Contains(typeURLs, r.TypeUrl) {
				e.t.Fatalf("unexpected %s response while waiting for %v", r.TypeUrl, typeURLs)
			}
			got[r.TypeUrl] = r
			e.versions[r.TypeUrl], e.nonces[r.TypeUrl] = r.VersionInfo, r.Nonce
		case err := <-errc:
			e.t.Fatalf("stream ended waiting for %v: %v", typeURLs, err)
		case <-deadline.C:
			var missing []string
			for _, typ := range typeURLs {
				if got[typ] == nil {
					missing = append(missing, typ)
				}
			}
			e.t.Fatalf("no %v response within %s to requests for %v", missing, within, e.names)
		}
	}
	return got
}

func unmarshalAll[M any, P interface {
	*M
	proto.Message
}](t *testing.T, rs []*anypb.Any) []P {
	t.Helper()
	var out []P
	for _, a := range rs {
		m := P(new(M))
		if err := a.UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// responseWithin is how long the server may take to answer a request it can answer from the
// snapshot: an immediate answer on a loopback stream, with room for a loaded machine.
const responseWithin = 5 * time.Second

// TestSotWSecretsInEnvoysOrder: over state-of-the-world ADS, Envoy asks for the secrets its clusters'
// transport sockets name as soon as it applied the clusters, before it has a listener, and for the
// listener's secrets only after LDS. Each request names a part of the snapshot's secrets; each must
// be answered at once with the secrets it names, or Envoy's clusters wait for their SDS secrets
// until initial_fetch_timeout (15 s unset) on every start, and the test data plane (which does not
// give up) never serves.
//
// Envoy's order, read in source/common/upstream/cds_api_helper.cc (CdsApiHelper::onConfigUpdate
// pauses EDS, LEDS and SDS while it applies a CDS response, so the clusters' SDS watches go out as
// one request when it returns, before the CDS ACK that GrpcMuxImpl::onDiscoveryResponse queues after
// it) and source/common/listener_manager/lds_api.cc (LdsApiImpl::onConfigUpdate pauses RDS, SRDS
// and SDS the same way); GrpcMuxImpl::sendDiscoveryRequest names the union of every watch's names.
func TestSotWSecretsInEnvoysOrder(t *testing.T) {
	ts := startServer(t, newFakeSource(xdstest.Scenario(t, "testdata/skewed.in.yaml")), time.Hour)
	e := newSotWEnvoy(t, ts)

	e.want(resourcev3.ClusterType, nil)
	cds := e.await(responseWithin, resourcev3.ClusterType)[resourcev3.ClusterType]
	var clusterSecrets []string
	for _, c := range unmarshalAll[clusterv3.Cluster](t, cds.Resources) {
		clusterSecrets = append(clusterSecrets, secretNames(t, c.TransportSocket)...)
		for _, m := range c.TransportSocketMatches {
			clusterSecrets = append(clusterSecrets, secretNames(t, m.TransportSocket)...)
		}
	}
	slices.Sort(clusterSecrets)
	clusterSecrets = slices.Compact(clusterSecrets)
	if len(clusterSecrets) == 0 {
		t.Fatal("the clusters name no SDS secret: the test would show nothing")
	}
	e.want(resourcev3.SecretType, clusterSecrets)
	e.send(resourcev3.ClusterType) // the CDS ACK
	sds := e.await(responseWithin, resourcev3.SecretType)[resourcev3.SecretType]
	if got := secretNamesOf(t, sds); !slices.Equal(got, clusterSecrets) {
		t.Fatalf("SDS answered %v to a request for %v", got, clusterSecrets)
	}
	e.send(resourcev3.SecretType) // the SDS ACK

	// The cluster manager initialized: LDS.
	e.want(resourcev3.ListenerType, nil)
	lds := e.await(responseWithin, resourcev3.ListenerType)[resourcev3.ListenerType]
	var listenerSecrets, routeNames []string
	for _, l := range unmarshalAll[listenerv3.Listener](t, lds.Resources) {
		s, r := listenerRefs(t, l)
		listenerSecrets, routeNames = append(listenerSecrets, s...), append(routeNames, r...)
	}
	all := slices.Concat(clusterSecrets, listenerSecrets)
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) == len(clusterSecrets) {
		t.Fatalf("the listener names no secret the clusters do not (%v): the second request would show nothing", listenerSecrets)
	}
	e.want(resourcev3.RouteType, routeNames)
	e.want(resourcev3.SecretType, all)
	e.send(resourcev3.ListenerType) // the LDS ACK
	got := e.await(responseWithin, resourcev3.RouteType, resourcev3.SecretType)
	if names := secretNamesOf(t, got[resourcev3.SecretType]); !slices.Equal(names, all) {
		t.Fatalf("SDS answered %v to a request for %v", names, all)
	}
	if len(got[resourcev3.RouteType].Resources) != len(routeNames) {
		t.Errorf("RDS answered %d route configurations to a request for %v", len(got[resourcev3.RouteType].Resources), routeNames)
	}
}

func secretNamesOf(t *testing.T, r *discoveryservice.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, s := range unmarshalAll[tlsv3.Secret](t, r.Resources) {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// listenerRefs returns the SDS secrets and RDS route configurations l's filter chains name.
func listenerRefs(t *testing.T, l *listenerv3.Listener) (secrets, routes []string) {
	t.Helper()
	for _, fc := range l.FilterChains {
		secrets = append(secrets, secretNames(t, fc.TransportSocket)...)
		for _, f := range fc.Filters {
			var hcm hcmv3.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
				continue
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				routes = append(routes, n)
			}
		}
	}
	return secrets, routes
}

// TestDeltaSecretsInEnvoysOrder: the same order over delta ADS, where each request subscribes to
// the names it adds: the clusters' secrets, then the listener's, each answered at once.
func TestDeltaSecretsInEnvoysOrder(t *testing.T) {
	ts := startServer(t, newFakeSource(xdstest.Scenario(t, "testdata/skewed.in.yaml")), time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 2*responseWithin)
	defer cancel()
	s, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := testNode
	send := func(typeURL, nonce string, subscribe ...string) {
		t.Helper()
		if err := s.Send(&discoveryservice.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResponseNonce: nonce, ResourceNamesSubscribe: subscribe}); err != nil {
			t.Fatal(err)
		}
		node = nil
	}
	recv := func(typeURL string) *discoveryservice.DeltaDiscoveryResponse {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("waiting for %s: %v", typeURL, err)
		}
		if r.TypeUrl != typeURL {
			t.Fatalf("got a %s response, want %s", r.TypeUrl, typeURL)
		}
		return r
	}
	names := func(r *discoveryservice.DeltaDiscoveryResponse) []string {
		var out []string
		for _, res := range r.Resources {
			out = append(out, res.Name)
		}
		slices.Sort(out)
		return out
	}

	send(resourcev3.ClusterType, "")
	cds := recv(resourcev3.ClusterType)
	var clusterSecrets []string
	for _, r := range cds.Resources {
		var c clusterv3.Cluster
		if err := r.Resource.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		clusterSecrets = append(clusterSecrets, secretNames(t, c.TransportSocket)...)
		for _, m := range c.TransportSocketMatches {
			clusterSecrets = append(clusterSecrets, secretNames(t, m.TransportSocket)...)
		}
	}
	slices.Sort(clusterSecrets)
	clusterSecrets = slices.Compact(clusterSecrets)
	send(resourcev3.SecretType, "", clusterSecrets...)
	send(resourcev3.ClusterType, cds.Nonce)
	sds := recv(resourcev3.SecretType)
	if got := names(sds); !slices.Equal(got, clusterSecrets) {
		t.Fatalf("SDS answered %v to a subscription to %v", got, clusterSecrets)
	}
	send(resourcev3.SecretType, sds.Nonce)

	send(resourcev3.ListenerType, "")
	lds := recv(resourcev3.ListenerType)
	var added []string
	for _, r := range lds.Resources {
		var l listenerv3.Listener
		if err := r.Resource.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		secrets, _ := listenerRefs(t, &l)
		for _, n := range secrets {
			if !slices.Contains(clusterSecrets, n) && !slices.Contains(added, n) {
				added = append(added, n)
			}
		}
	}
	slices.Sort(added)
	if len(added) == 0 {
		t.Fatal("the listener names no secret the clusters do not: the test would show nothing")
	}
	send(resourcev3.SecretType, "", added...)
	send(resourcev3.ListenerType, lds.Nonce)
	if got := names(recv(resourcev3.SecretType)); !slices.Equal(got, added) {
		t.Fatalf("SDS answered %v to a subscription to %v", got, added)
	}
}
