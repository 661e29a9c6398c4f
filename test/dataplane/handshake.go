package dataplane

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// handshakeListener completes each accepted connection's TLS handshake before the HTTP server sees
// it, bounded by the filter chain's transport_socket_connect_timeout alone, as Envoy does:
// ServerConnectionImpl::setTransportSocketConnectTimeout arms a timer at accept (only for a
// non-zero timeout, source/common/listener_manager/active_stream_listener_base.cc), raiseEvent
// (Connected) cancels it once the handshake completed, and its expiry closes the connection at once
// (source/common/network/connection_impl.cc, newest stored copies). Without the field nothing
// bounds the handshake: the connection manager's request_headers_timeout starts with a stream,
// and Go's http.Server would otherwise apply its ReadHeaderTimeout to the handshake, closing such
// sockets sooner than Envoy.
type handshakeListener struct {
	net.Listener
	cfg     *tls.Config
	timeout *atomic.Int64 // nanoseconds; 0: none
	logf    func(string, ...any)
	ready   chan net.Conn
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pending map[net.Conn]bool
	closed  bool

	timedOut atomic.Int64
}

func newHandshakeListener(inner net.Listener, cfg *tls.Config, timeout *atomic.Int64, logf func(string, ...any)) *handshakeListener {
	l := &handshakeListener{Listener: inner, cfg: cfg, timeout: timeout, logf: logf,
		ready: make(chan net.Conn), done: make(chan struct{}), pending: map[net.Conn]bool{}}
	go l.loop()
	return l
}

// loop accepts until the listener is closed. Other accept errors (out of file descriptors) are
// retried with net/http's back-off, 5 ms doubling to 1 s, as Envoy keeps its listener.
func (l *handshakeListener) loop() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.Close()
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.logf("listener: accept: %v; retrying in %v", err, delay)
			select {
			case <-time.After(delay):
			case <-l.done:
				return
			}
			continue
		}
		delay = 0
		go l.handshake(c)
	}
}

func (l *handshakeListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.cfg)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.pending[tc] = true
	l.mu.Unlock()
	if d := time.Duration(l.timeout.Load()); d > 0 {
		tc.SetDeadline(time.Now().Add(d))
	}
	err := tc.Handshake()
	l.mu.Lock()
	delete(l.pending, tc)
	l.mu.Unlock()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			l.timedOut.Add(1)
			l.logf("listener: transport socket connect timeout: connection closed (downstream_cx_transport_socket_connect_timeout)")
		}
		tc.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	select {
	case l.ready <- tc:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection whose handshake completed.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the connections still in their handshake.
func (l *handshakeListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.pending {
			c.Close()
		}
		l.mu.Unlock()
	})
	return err
}
