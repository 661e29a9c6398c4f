package dataplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
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
	lua      *luaFilter
	router   bool
}

// chain is the listener's HTTP connection manager as the request path needs it.
type chain struct {
	hcm      *hcmv3.HttpConnectionManager
	filters  []filter
	upgrades map[string]bool
	internal *internalAddresses
	local    net.Addr
	// tls is the listener's server TLS, routeName its RDS route configuration, secrets the SDS
	// secrets its TLS context names: what the listener warms for.
	tls       *tls.Config
	routeName string
	secrets   []string
	// connectTimeout is the filter chain's transport_socket_connect_timeout (0: none).
	connectTimeout time.Duration
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
		case *luav3.Lua:
			lf, err := newLuaFilter(cfg, d.logf)
			if err != nil {
				return nil, fmt.Errorf("filter %s: %w", hf.Name, err)
			}
			ch.filters = append(ch.filters, filter{name: hf.Name, lua: lf})
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
// configuration and the SDS secrets the listener names. The listener is not served at once: it
// warms (see maybeActivate) and replaces the active one only when its routes and secrets are there.
// The first listener's socket is bound here, so that a taken address is a NACK, as in Envoy, but
// listens only when the listener is activated.
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
	ch.tls = tc
	ch.routeName = ch.hcm.GetRds().GetRouteConfigName()
	ch.secrets = secretNames(l.FilterChains[0].TransportSocket)
	ch.connectTimeout = l.FilterChains[0].GetTransportSocketConnectTimeout().AsDuration()
	sa := l.GetAddress().GetSocketAddress()
	d.mu.Lock()
	if d.server == nil && d.bound == nil {
		b, err := bindTCP(sa.GetAddress(), int(sa.GetPortValue()))
		if err != nil {
			d.mu.Unlock()
			return nil, nil, err
		}
		d.bound, d.addr = b, b.addr
	}
	d.warming = ch // a listener still warming is replaced in place
	d.mu.Unlock()
	d.maybeActivate()
	return []string{ch.routeName}, ch.secrets, nil
}

// applyRoutes takes the route configurations of an RDS response (one per subscribed name).
func (d *DataPlane) applyRoutes(resources []*anypb.Any) error {
	if len(resources) == 0 {
		return errors.New("want a route configuration")
	}
	next := map[string]*routev3.RouteConfiguration{}
	if cur := d.routes.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	for _, a := range resources {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			return err
		}
		if err := checkRouteConfiguration(&rc); err != nil {
			return err
		}
		next[rc.Name] = &rc
	}
	d.routes.Store(&next)
	d.maybeActivate()
	return nil
}

// routeConfig is the accepted route configuration of that name, or nil.
func (d *DataPlane) routeConfig(name string) *routev3.RouteConfiguration {
	if m := d.routes.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}
