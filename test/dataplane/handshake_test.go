package dataplane

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// openAfter dials the front, sends nothing and reports whether the front still holds the socket
// after d (a read that times out) or closed it before (EOF or reset), and when.
func openAfter(t *testing.T, addr string, d time.Duration) (open bool, closedAfter time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	_, err = c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return true, 0
	case errors.Is(err, io.EOF) || isReset(err):
		return false, time.Since(start)
	}
	t.Fatalf("read on a silent connection: %v, want a timeout, EOF or reset", err)
	return false, 0
}

// TestTransportSocketConnectTimeout follows ServerConnectionImpl::setTransportSocketConnectTimeout
// (source/common/network/connection_impl.cc): with the filter chain's
// transport_socket_connect_timeout a socket that never completes its TLS handshake is closed when
// it expires; without it nothing closes such a socket early, not even the connection manager's
// request_headers_timeout (it starts with a stream). A client that completes its handshake is served.
func TestTransportSocketConnectTimeout(t *testing.T) {
	short := func(hcm *hcmv3.HttpConnectionManager) {
		hcm.RequestHeadersTimeout = durationpb.New(300 * time.Millisecond)
	}

	t.Run("unset", func(t *testing.T) {
		a := newUpstream(t, "a")
		f := startFront(t, Delta, listener(t, short), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
		f.waitActive("a")
		if open, after := openAfter(t, f.dp.Addr(), time.Second); !open {
			t.Errorf("without transport_socket_connect_timeout a silent socket was closed after %v; Envoy keeps it (request_headers_timeout 300ms starts with a stream)", after)
		}
	})
	t.Run("set", func(t *testing.T) {
		a := newUpstream(t, "a")
		l := listener(t, nil)
		l.FilterChains[0].TransportSocketConnectTimeout = durationpb.New(300 * time.Millisecond)
		f := startFront(t, Delta, l, routes(routeTo("default", "a")), plainCluster("a", a.addr()))
		f.waitActive("a")
		open, after := openAfter(t, f.dp.Addr(), 5*time.Second)
		if open || after < 300*time.Millisecond {
			t.Errorf("with a 300ms transport_socket_connect_timeout a silent socket: open after 5s %v, closed after %v; want closed at the timeout", open, after)
		}
		if code, body := get(t, f.client(true), f.url("/x")); code != 200 || body != "a" {
			t.Errorf("a client that completes its handshake: %d %q, want 200 from a", code, body)
		}
		if n := f.dp.handshakes.timedOut.Load(); n != 1 {
			t.Errorf("transport socket connect timeouts = %d, want 1", n)
		}
	})
}

// failingListener fails its first n accepts with a non-closed error, as accept(2) does with EMFILE.
type failingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, syscall.EMFILE
	}
	return l.Listener.Accept()
}

// TestHandshakeListenerRetriesAcceptErrors: an accept error other than a closed listener (out of
// file descriptors) does not stop the listener: Envoy keeps listening, and net/http, which served the
// stand-in's listener before, retries such errors with back-off too.
func TestHandshakeListenerRetriesAcceptErrors(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: inner}
	fl.n.Store(3)
	var timeout atomic.Int64
	l := newHandshakeListener(fl, &tls.Config{Certificates: []tls.Certificate{newPKI(t).tlsPair(t, "front", []string{"front"}, false)}}, &timeout, t.Logf)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", inner.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("after 3 accept errors: %v, want the next connection", err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if n := fl.n.Load(); n >= 0 {
		t.Errorf("accept errors left unconsumed: %d", n+1)
	}
}
