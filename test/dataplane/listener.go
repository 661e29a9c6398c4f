package dataplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// filter is one HTTP filter of the chain, in order.
type filter struct {
	name     string
	mutation *headermutationv3.HeaderMutation
	extProc  *extprocfilterv3.ExternalProcessor
	router   bool
}

// chain is the listener's HTTP connection manager as the request path needs it.
type chain struct {
	hcm      *hcmv3.HttpConnectionManager
	filters  []filter
	upgrades map[string]bool
	internal *internalAddresses
	local    net.Addr
}

func (d *DataPlane) buildChain(l *listenerv3.Listener) (*chain, error) {
	fs := l.FilterChains[0].Filters
	if len(fs) != 1 {
		return nil, errors.New("want one network filter (http_connection_manager)")
	}
	var hcm hcmv3.HttpConnectionManager
	if err := fs[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, err
	}
	if hcm.GetRds() == nil {
		return nil, errors.New("the HTTP connection manager must take its routes from RDS")
	}
	ia, err := newInternalAddresses(hcm.InternalAddressConfig)
	if err != nil {
		return nil, err
	}
	ch := &chain{hcm: &hcm, upgrades: map[string]bool{}, internal: ia}
	for _, u := range hcm.UpgradeConfigs {
		if u.Enabled == nil || u.Enabled.Value {
			ch.upgrades[strings.ToLower(u.UpgradeType)] = true
		}
	}
	for _, hf := range hcm.HttpFilters {
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("filter %s: %w", hf.Name, err)
		}
		switch cfg := m.(type) {
		case *headermutationv3.HeaderMutation:
			ch.filters = append(ch.filters, filter{name: hf.Name, mutation: cfg})
		case *extprocfilterv3.ExternalProcessor:
			if cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
				return nil, fmt.Errorf("filter %s: only envoy_grpc is supported", hf.Name)
			}
			if m := cfg.GetProcessingMode(); m.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_NONE || m.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_NONE {
				return nil, fmt.Errorf("filter %s: body modes are not supported by the test data plane", hf.Name)
			}
			ch.filters = append(ch.filters, filter{name: hf.Name, extProc: cfg})
		case *routerv3.Router:
			ch.filters = append(ch.filters, filter{name: hf.Name, router: true})
		default:
			return nil, fmt.Errorf("filter %s: %s is not supported by the test data plane", hf.Name, proto.MessageName(m))
		}
	}
	if len(ch.filters) == 0 || !ch.filters[len(ch.filters)-1].router {
		return nil, errors.New("the last filter must be the router")
	}
	return ch, nil
}

// applyListener takes the complete set of listeners (skewgate serves one); it returns the route
// configuration and the SDS secrets the listener names.
func (d *DataPlane) applyListener(resources []*anypb.Any) (routes, secrets []string, err error) {
	if len(resources) != 1 {
		return nil, nil, fmt.Errorf("want one listener, got %d", len(resources))
	}
	var l listenerv3.Listener
	if err := resources[0].UnmarshalTo(&l); err != nil {
		return nil, nil, err
	}
	if err := l.ValidateAll(); err != nil {
		return nil, nil, err
	}
	if len(l.FilterChains) != 1 || l.FilterChains[0].TransportSocket == nil {
		return nil, nil, errors.New("want exactly one filter chain with TLS")
	}
	tc, err := downstreamTLS(l.FilterChains[0].TransportSocket, d.secrets)
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
		// The TLS config is taken per connection so a listener update applies to new connections.
		var current atomic.Pointer[tls.Config]
		current.Store(tc)
		d.tlsSwap = &current
		srv := &http.Server{
			Handler:           http.HandlerFunc(d.serveHTTP),
			ReadHeaderTimeout: ch.hcm.GetRequestHeadersTimeout().AsDuration(),
			TLSConfig: &tls.Config{NextProtos: tc.NextProtos, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				return current.Load().GetConfigForClient(hello)
			}},
			ErrorLog: discardLog,
		}
		d.server = srv
		go srv.ServeTLS(lis, "", "")
	} else {
		d.tlsSwap.Store(tc)
	}
	d.chain.Store(ch)
	refs := secretNames(l.FilterChains[0].TransportSocket)
	d.listenerSecrets.Store(&refs)
	return []string{ch.hcm.GetRds().GetRouteConfigName()}, refs, nil
}

func (d *DataPlane) applyRoutes(resources []*anypb.Any) error {
	if len(resources) != 1 {
		return errors.New("want one route configuration")
	}
	var rc routev3.RouteConfiguration
	if err := resources[0].UnmarshalTo(&rc); err != nil {
		return err
	}
	if err := rc.ValidateAll(); err != nil {
		return err
	}
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			if err := checkRoute(r); err != nil {
				return fmt.Errorf("route %s: %w", r.Name, err)
			}
		}
	}
	d.routes.Store(&rc)
	d.maybeReady()
	return nil
}

// maybeReady reports the listener ready once it has its routes and every SDS secret its TLS
// context names (Envoy's listener warms until then).
func (d *DataPlane) maybeReady() {
	refs := d.listenerSecrets.Load()
	if refs == nil || d.routes.Load() == nil {
		return
	}
	for _, n := range *refs {
		if !d.secrets.has(n) {
			return
		}
	}
	d.readyOne.Do(func() { close(d.ready) })
}
