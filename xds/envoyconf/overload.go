package envoyconf

import (
	"fmt"

	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	connectionsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
)

// GlobalConnectionsMonitor names the overload manager's downstream-connections resource monitor.
// Envoy takes a resource monitor for a proactive one only under this exact name
// (OverloadManagerImpl's constructor looks resource.name() up in
// OverloadProactiveResources::proactive_action_name_to_resource_, source/server/overload_manager_impl.cc);
// the factory registered for DownstreamConnectionsConfig carries the same name
// (source/extensions/resource_monitors/downstream_connections/config.h; the copies read are named
// below).
const GlobalConnectionsMonitor = "envoy.resource_monitors.global_downstream_max_connections"

// globalConnectionsMonitor bounds the downstream connections of every listener together to max.
//
// The runtime key overload.global_downstream_max_connections this replaces is deprecated since
// 1.30 ("will be removed in future"); where both are set Envoy uses the monitor and warns
// (TcpListenerImpl::rejectCxOverGlobalLimit, source/common/network/tcp_listener_impl.cc). With the
// monitor every accepted socket takes one unit from it (tryAllocateResource: current + 1 <= max,
// ActiveDownstreamConnectionsResourceMonitor in
// source/extensions/resource_monitors/downstream_connections/downstream_connections_monitor.cc)
// and gives it back when the socket is destroyed; a socket over the limit is accepted and closed
// at once, before any byte of TLS, and counted in the listener's downstream_global_cx_overflow. So
// a flood of connections is turned away at accept while established clients keep theirs. The
// monitor needs no trigger or action. Read at envoyproxy/envoy: tcp_listener_impl.cc at 02c34dc820 (1.3x main, with the
// overload-manager path and the runtime fallback), downstream_connections_monitor.cc and config.cc
// at 040783c8c0, overload_manager_impl.cc in 1.3x main copies whose commit was not recorded; none
// at the 1.37.6..1.40.0 tags, whose changelogs change none of this (test/dataplane/CONFORMANCE.md
// row 38).
func globalConnectionsMonitor(limit int) (*overloadv3.OverloadManager, error) {
	cfg := &connectionsv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: int64(limit)}
	if err := cfg.ValidateAll(); err != nil {
		return nil, fmt.Errorf("downstream connections monitor: %w", err)
	}
	a, err := Pack(cfg)
	if err != nil {
		return nil, err
	}
	return &overloadv3.OverloadManager{
		ResourceMonitors: []*overloadv3.ResourceMonitor{{
			Name:       GlobalConnectionsMonitor,
			ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: a},
		}},
	}, nil
}
