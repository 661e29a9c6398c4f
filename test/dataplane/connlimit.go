package dataplane

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	connectionsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
)

// globalCxMonitor is the name under which Envoy takes a resource monitor for the proactive
// downstream-connections resource (OverloadProactiveResources, source/server/overload_manager_impl.cc).
const globalCxMonitor = "envoy.resource_monitors.global_downstream_max_connections"

// globalCxRuntimeKey is the deprecated runtime key Envoy still reads when no such monitor is set.
const globalCxRuntimeKey = "overload.global_downstream_max_connections"

// connLimit is the global downstream connection limit as source/common/network/tcp_listener_impl.cc
// enforces it (TcpListenerImpl::rejectCxOverGlobalLimit, called for every socket accept() returned,
// before the listener filters and TLS): with the overload manager's downstream-connections monitor
// each accepted socket takes one unit (tryAllocateResource: current + 1 <= max,
// downstream_connections_monitor.cc) and gives it back when the socket is destroyed
// (AcceptedSocketImpl); without it the runtime key bounds the count of accepted sockets
// (count >= limit rejects); with neither nothing is limited. A socket over the limit is closed at
// once and counted as downstream_global_cx_overflow; established connections are untouched. The
// admin listener (ignore_global_conn_limit) is not served by the stand-in.
type connLimit struct {
	max      int64 // 0: no limit
	current  atomic.Int64
	overflow atomic.Int64
}

// newConnLimit reads the limit from the bootstrap like Envoy: the overload manager's monitor, else
// the runtime key in a static layer. A resource monitor the stand-in does not model is refused
// rather than ignored.
func newConnLimit(b *bootstrapv3.Bootstrap) (*connLimit, error) {
	l := &connLimit{}
	if b == nil {
		return l, nil
	}
	for _, m := range b.GetOverloadManager().GetResourceMonitors() {
		if m.GetName() != globalCxMonitor {
			return nil, fmt.Errorf("dataplane: overload manager resource monitor %q is not modelled", m.GetName())
		}
		if l.max != 0 {
			return nil, fmt.Errorf("dataplane: duplicate resource monitor %s", m.GetName()) // OverloadManagerImpl
		}
		var cfg connectionsv3.DownstreamConnectionsConfig
		if err := m.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			return nil, fmt.Errorf("dataplane: resource monitor %s: %w", m.GetName(), err)
		}
		if err := cfg.ValidateAll(); err != nil { // max_active_downstream_connections > 0
			return nil, fmt.Errorf("dataplane: resource monitor %s: %w", m.GetName(), err)
		}
		l.max = cfg.MaxActiveDownstreamConnections
	}
	if l.max != 0 {
		return l, nil // the monitor wins over the runtime key (Envoy warns once)
	}
	for _, layer := range b.GetLayeredRuntime().GetLayers() {
		v := layer.GetStaticLayer().GetFields()["overload"].GetStructValue().GetFields()["global_downstream_max_connections"]
		if v == nil {
			v = layer.GetStaticLayer().GetFields()[globalCxRuntimeKey]
		}
		if v != nil {
			if n := int64(v.GetNumberValue()); n > 0 {
				l.max = n // a later layer overrides an earlier one
			}
		}
	}
	return l, nil
}

func (l *connLimit) tryAllocate() bool {
	if l.max == 0 {
		l.current.Add(1)
		return true
	}
	for {
		c := l.current.Load()
		if c+1 > l.max {
			return false
		}
		if l.current.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// wrap enforces the limit on the connections lis accepts.
func (l *connLimit) wrap(lis net.Listener, logf func(string, ...any)) net.Listener {
	return &limitedListener{Listener: lis, l: l, logf: logf}
}

type limitedListener struct {
	net.Listener
	l    *connLimit
	logf func(string, ...any)
}

func (ll *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !ll.l.tryAllocate() {
			c.Close()
			if n := ll.l.overflow.Add(1); n == 1 || n%1000 == 0 {
				ll.logf("listener: global connection limit %d reached, %d connections closed at accept (downstream_global_cx_overflow)", ll.l.max, n)
			}
			continue
		}
		return &limitedConn{Conn: c, l: ll.l}, nil
	}
}

// limitedConn gives its unit back once, when closed.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.current.Add(-1) })
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
