package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/skewgate/skewgate/xds"
)

// Config tells the data plane where its control plane is.
type Config struct {
	// XDSAddress is skewgate's xDS server (plaintext, loopback).
	XDSAddress string
	NodeID     string
	Logf       func(format string, args ...any)
}

// DataPlane is a running test data plane.
type DataPlane struct {
	cfg      Config
	clusters clusters
	secrets  secretStore
	routes   atomic.Pointer[routev3.RouteConfiguration]
	chain    atomic.Pointer[chain]

	mu       sync.Mutex
	server   *http.Server
	addr     string
	ready    chan struct{} // closed once the listener serves with routes
	readyOne sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	tlsSwap  *atomic.Pointer[tls.Config]
}

func newProcessorClient(conn *grpc.ClientConn) extprocv3.ExternalProcessorClient {
	return extprocv3.NewExternalProcessorClient(conn)
}

// Start connects to the xDS server and returns once the listener serves (or ctx ends).
func Start(ctx context.Context, cfg Config) (*DataPlane, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	conn, err := grpc.NewClient(cfg.XDSAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	d := &DataPlane{cfg: cfg, clusters: clusters{m: map[string]*cluster{}}, ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer conn.Close()
		for rctx.Err() == nil {
			if err := d.subscribe(rctx, conn); err != nil && rctx.Err() == nil {
				cfg.Logf("dataplane: xDS stream ended: %v; reconnecting", err)
				select {
				case <-rctx.Done():
				case <-time.After(200 * time.Millisecond): // back-off before redialing, as Envoy does
				}
			}
		}
	}()
	select {
	case <-d.ready:
		return d, nil
	case <-ctx.Done():
		d.Close()
		return nil, fmt.Errorf("dataplane: no listener from xDS: %w", ctx.Err())
	}
}

// Addr is the address the listener is bound to.
func (d *DataPlane) Addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addr
}

// Close stops the listener, the health checks and the xDS stream.
func (d *DataPlane) Close() {
	d.cancel()
	<-d.done
	d.mu.Lock()
	if d.server != nil {
		d.server.Close()
	}
	d.mu.Unlock()
	d.clusters.mu.Lock()
	for _, c := range d.clusters.m {
		c.stop()
	}
	d.clusters.mu.Unlock()
}

// subscribe runs one ADS stream: CDS first, then LDS, then RDS for the listener's route table, like
// Envoy's initialization order (arch_overview/operations/init: clusters before listeners).
func (d *DataPlane) subscribe(ctx context.Context, conn *grpc.ClientConn) error {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	// Like Envoy, which fills these in from its build (skewgate refuses other clients and old Envoys).
	node := &corev3.Node{Id: d.cfg.NodeID, Cluster: "skewgate-test-dataplane", UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 40, Patch: 0},
		}}}
	versions := map[string]string{}
	send := func(typ string, names []string, nonce string, nack error) error {
		req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names, VersionInfo: versions[typ], ResponseNonce: nonce}
		if nack != nil {
			req.ErrorDetail = &status.Status{Code: 3, Message: nack.Error()}
		}
		return stream.Send(req)
	}
	if err := send(resourcev3.ClusterType, nil, "", nil); err != nil {
		return err
	}
	requested := map[string]bool{resourcev3.ClusterType: true}
	var routeNames []string
	// Secrets are requested by name as clusters and listeners reference them (Envoy does the same:
	// SDS subscriptions follow the TLS contexts that name them).
	secretNames := map[string]bool{}
	requestSecrets := func(names []string) error {
		added := false
		for _, n := range names {
			if !secretNames[n] {
				secretNames[n], added = true, true
			}
		}
		if !added {
			return nil
		}
		var all []string
		for n := range secretNames {
			all = append(all, n)
		}
		slices.Sort(all)
		return send(resourcev3.SecretType, all, "", nil)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		var applyErr error
		var refs []string
		switch resp.TypeUrl {
		case resourcev3.ClusterType:
			refs, applyErr = d.applyClusters(ctx, resp)
		case resourcev3.ListenerType:
			routeNames, refs, applyErr = d.applyListener(resp)
		case resourcev3.RouteType:
			applyErr = d.applyRoutes(resp)
		case resourcev3.SecretType:
			applyErr = d.applySecrets(resp)
		}
		names := []string(nil)
		switch resp.TypeUrl {
		case resourcev3.RouteType:
			names = routeNames
		case resourcev3.SecretType:
			for n := range secretNames {
				names = append(names, n)
			}
			slices.Sort(names)
		}
		if applyErr != nil {
			d.cfg.Logf("dataplane: NACK %s %s: %v", resp.TypeUrl, resp.VersionInfo, applyErr)
		} else {
			versions[resp.TypeUrl] = resp.VersionInfo
		}
		if err := send(resp.TypeUrl, names, resp.Nonce, applyErr); err != nil {
			return err
		}
		if applyErr != nil {
			continue
		}
		if err := requestSecrets(refs); err != nil {
			return err
		}
		if !requested[resourcev3.ListenerType] {
			requested[resourcev3.ListenerType] = true
			if err := send(resourcev3.ListenerType, nil, "", nil); err != nil {
				return err
			}
		}
		if resp.TypeUrl == resourcev3.ListenerType && len(routeNames) > 0 && !requested[resourcev3.RouteType] {
			requested[resourcev3.RouteType] = true
			if err := send(resourcev3.RouteType, routeNames, "", nil); err != nil {
				return err
			}
		}
	}
}

func (d *DataPlane) applySecrets(resp *discoveryv3.DiscoveryResponse) error {
	m := map[string]*tlsv3.Secret{}
	for _, a := range resp.Resources {
		var sec tlsv3.Secret
		if err := a.UnmarshalTo(&sec); err != nil {
			return err
		}
		if err := sec.ValidateAll(); err != nil {
			return err
		}
		m[sec.Name] = &sec
	}
	d.secrets.m.Store(&m)
	return nil
}

func (d *DataPlane) applyClusters(ctx context.Context, resp *discoveryv3.DiscoveryResponse) ([]string, error) {
	var refs []string
	next := map[string]*cluster{}
	d.clusters.mu.RLock()
	old := d.clusters.m
	d.clusters.mu.RUnlock()
	for _, a := range resp.Resources {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			return nil, err
		}
		if err := c.ValidateAll(); err != nil {
			return nil, err
		}
		cl, err := newCluster(&c, old[c.Name], &d.secrets)
		if err != nil {
			for _, n := range next {
				n.stop()
			}
			return nil, err
		}
		next[c.Name] = cl
		refs = append(refs, xds.SecretNames(c.TransportSocket)...)
	}
	for _, c := range next {
		c.start(ctx)
	}
	d.clusters.mu.Lock()
	d.clusters.m = next
	d.clusters.mu.Unlock()
	for _, c := range old {
		c.stop()
	}
	return refs, nil
}

func (d *DataPlane) applyListener(resp *discoveryv3.DiscoveryResponse) (routes, secrets []string, err error) {
	if len(resp.Resources) != 1 {
		return nil, nil, fmt.Errorf("want one listener, got %d", len(resp.Resources))
	}
	var l listenerv3.Listener
	if err := resp.Resources[0].UnmarshalTo(&l); err != nil {
		return nil, nil, err
	}
	if err := l.ValidateAll(); err != nil {
		return nil, nil, err
	}
	tc, err := downstreamTLS(&l, &d.secrets)
	if err != nil {
		return nil, nil, err
	}
	ch, err := d.buildChain(&l)
	if err != nil {
		return nil, nil, err
	}
	sa := l.GetAddress().GetSocketAddress()
	addr := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.server == nil {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("bind %s: %w", addr, err)
		}
		d.addr = lis.Addr().String()
		// TLS config is taken per connection so a listener update applies to new connections.
		var current atomic.Pointer[tls.Config]
		current.Store(tc)
		d.tlsSwap = &current
		srv := &http.Server{
			Handler:           http.HandlerFunc(d.serveHTTP),
			ReadHeaderTimeout: ch.hcm.GetRequestHeadersTimeout().AsDuration(),
			TLSConfig: &tls.Config{NextProtos: tc.NextProtos, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				return current.Load().GetConfigForClient(hello)
			}},
		}
		d.server = srv
		go srv.ServeTLS(lis, "", "")
	} else {
		d.tlsSwap.Store(tc)
	}
	if prev := d.chain.Swap(ch); prev != nil {
		for _, f := range prev.filters {
			if f.extProc != nil {
				go func() { time.Sleep(time.Minute); f.extProc.conn.Close() }() // let in-flight calls end
			}
		}
	}
	return []string{ch.hcm.GetRds().GetRouteConfigName()}, xds.SecretNames(l.FilterChains[0].TransportSocket), nil
}

func (d *DataPlane) applyRoutes(resp *discoveryv3.DiscoveryResponse) error {
	if len(resp.Resources) != 1 {
		return errors.New("want one route configuration")
	}
	var rc routev3.RouteConfiguration
	if err := resp.Resources[0].UnmarshalTo(&rc); err != nil {
		return err
	}
	if err := rc.ValidateAll(); err != nil {
		return err
	}
	d.routes.Store(&rc)
	d.readyOne.Do(func() { close(d.ready) })
	return nil
}
