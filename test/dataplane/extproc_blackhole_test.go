package dataplane

import (
	"net"
	"sync"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// blackHole accepts TCP connections and never reads or writes: no HTTP/2 preface, no SETTINGS.
func blackHole(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// TestExtProcBlackHole: a processor that accepts TCP but never speaks HTTP/2. Envoy's HTTP/2
// pool counts a connection ready when the transport connected, not when the server's SETTINGS
// arrived (MultiplexedActiveClientBase::onSettings, source/common/http/conn_pool_base.cc;
// ConnPoolImplBase::onConnectionEvent Connected -> onUpstreamReady, source/common/conn_pool/
// conn_pool_base.cc), so the stream's HEADERS go out on it; ext_proc started message_timeout when
// it sent the headers message (Filter::onHeaders: openStream, then onStartProcessorCall, then
// sendRequest), so the request fails open at message_timeout, not sooner, and fails closed with
// the timeout's 504. A processor that refuses the connection fails the stream at once (pool
// failure, onGrpcError): failing closed, that is status_on_error's 500, not 504.
func TestExtProcBlackHole(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		addr     func(*testing.T) string
		allow    bool
		wantCode int
		slow     bool // must take at least message_timeout
	}{
		{"black hole, fail open", blackHole, true, 200, true},
		{"black hole, fail closed: message timeout", blackHole, false, 504, true},
		{"connection refused, fail closed: gRPC error", deadAddr, false, 500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newUpstream(t, "a")
			f := startFront(t, Delta, listener(t, nil, extprocFilter(t, func(c *extprocfilterv3.ExternalProcessor) {
				c.MessageTimeout, c.FailureModeAllow = durationpb.New(timeout), tc.allow
			})), routes(routeTo("default", "a")), plainCluster("a", a.addr()), extprocCluster(t, tc.addr(t)))
			f.waitActive("a")
			f.waitActive("extproc")
			c := f.client(false)
			for i := 0; i < 3; i++ {
				start := time.Now()
				code, _ := get(t, c, f.url("/"))
				took := time.Since(start)
				t.Logf("request %d: %d after %v", i, code, took.Round(time.Millisecond))
				if code != tc.wantCode {
					t.Errorf("request %d: %d, want %d", i, code, tc.wantCode)
				}
				if tc.slow && took < timeout {
					t.Errorf("request %d answered after %v, before message_timeout %v: Envoy waits for the processor", i, took, timeout)
				}
			}
			if want := map[bool]int{true: 3, false: 0}[tc.allow]; a.count() != want {
				t.Errorf("upstream got %d requests, want %d", a.count(), want)
			}
		})
	}
}
