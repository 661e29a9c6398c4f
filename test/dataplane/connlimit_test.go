package dataplane

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	connectionsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func connectionsBootstrap(t *testing.T, max int64) *bootstrapv3.Bootstrap {
	return &bootstrapv3.Bootstrap{OverloadManager: &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{{
		Name:       globalCxMonitor,
		ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: anyOf(t, &connectionsv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: max})},
	}}}}
}

// TestGlobalConnectionLimit: with the downstream-connections monitor at 3, a flood of connections
// gets 3 slots in all; every connection over the limit is accepted and closed before any TLS, while
// a client that was established before the flood keeps being served on its connection; a slot
// comes back when its connection closes.
func TestGlobalConnectionLimit(t *testing.T) {
	a := newUpstream(t, "a")
	f := startFrontBootstrap(t, Delta, connectionsBootstrap(t, 3), listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	f.waitActive("a")
	c := f.client(false)
	if code, body := get(t, c, f.url("/x")); code != 200 || body != "a" {
		t.Fatalf("established client: %d %q, want 200 from a", code, body)
	}

	// The flood: plain TCP connections that never speak. Two fit beside the client's.
	var flood []net.Conn
	t.Cleanup(func() {
		for _, fc := range flood {
			fc.Close()
		}
	})
	refused := 0
	for range 20 {
		fc, err := net.Dial("tcp", f.dp.Addr())
		if err != nil {
			t.Fatalf("dial: %v (Envoy accepts, then closes)", err)
		}
		flood = append(flood, fc)
		fc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := fc.Read(make([]byte, 1)); errors.Is(err, io.EOF) || isReset(err) {
			refused++
		}
	}
	if refused != 18 {
		t.Errorf("flood of 20 connections beside 1 established, limit 3: %d closed at accept, want 18", refused)
	}
	if n := f.dp.conns.overflow.Load(); n != 18 {
		t.Errorf("downstream_global_cx_overflow %d, want 18", n)
	}
	// A new TLS client over the limit never completes a handshake.
	if conn, err := tls.Dial("tcp", f.dp.Addr(), &tls.Config{RootCAs: f.pki.pool, ServerName: "front"}); err == nil {
		conn.Close()
		t.Error("a TLS client over the limit completed its handshake")
	}
	// The established client is untouched.
	for range 5 {
		if code, body := get(t, c, f.url("/x")); code != 200 || body != "a" {
			t.Fatalf("established client during the flood: %d %q, want 200", code, body)
		}
	}
	// Closing the flood gives the slots back.
	for _, fc := range flood {
		fc.Close()
	}
	flood = nil
	deadline := time.Now().Add(5 * time.Second)
	for f.dp.conns.current.Load() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fresh := f.client(false)
	if code, body := get(t, fresh, f.url("/x")); code != 200 || body != "a" {
		t.Errorf("a new client after the flood closed: %d %q, want 200", code, body)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset by peer")
}

// TestConnectionLimitConfig: the limit comes from the monitor, else from the deprecated runtime key
// (which the monitor overrides); a monitor of 0 fails validation and an unmodelled monitor is
// refused, not ignored.
func TestConnectionLimitConfig(t *testing.T) {
	rt := func(v float64) *bootstrapv3.LayeredRuntime {
		s, _ := structpb.NewStruct(map[string]any{"overload": map[string]any{"global_downstream_max_connections": v}})
		return &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{{Name: "static", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: s}}}}
	}
	both := connectionsBootstrap(t, 7)
	both.LayeredRuntime = rt(9)
	for name, tc := range map[string]struct {
		b    *bootstrapv3.Bootstrap
		want int64
	}{
		"none":        {nil, 0},
		"monitor":     {connectionsBootstrap(t, 7), 7},
		"runtime key": {&bootstrapv3.Bootstrap{LayeredRuntime: rt(9)}, 9},
		"both":        {both, 7},
	} {
		l, err := newConnLimit(tc.b)
		if err != nil || l.max != tc.want {
			t.Errorf("%s: limit %v, %v; want %d", name, l, err, tc.want)
		}
	}
	if _, err := newConnLimit(connectionsBootstrap(t, 0)); err == nil || !strings.Contains(err.Error(), "MaxActiveDownstreamConnections") {
		t.Errorf("monitor of 0: %v, want the validation error", err)
	}
	other := connectionsBootstrap(t, 7)
	other.OverloadManager.ResourceMonitors[0].Name = "envoy.resource_monitors.fixed_heap"
	if _, err := newConnLimit(other); err == nil || !strings.Contains(err.Error(), "not modelled") {
		t.Errorf("fixed_heap monitor: %v, want refused", err)
	}
}
