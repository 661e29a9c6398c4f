package dataplane

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Initialization order at (re)start, as Envoy's server runs it (source/server/server.cc: RunHelper
// registers clusterManager().setInitializedCb, which initializes the server's init manager, whose
// completion starts the workers; source/common/upstream/cluster_manager_impl.cc:
// ClusterManagerInitHelper waits for the first CDS response and for every cluster it brought to
// finish initializing, ClusterImplBase::onInitDone in upstream_impl.cc including the first health
// check of every host, passed or failed; source/common/listener_manager/listener_manager_impl.cc:
// before the workers start a listener's init targets, its RDS subscription and its SDS secrets, are
// targets of the server's init manager; ListenSocketFactoryImpl::doFinalPreWorkerInit calls
// listen() only just before the workers use the socket):
//
//  1. CDS: the clusters initialize (SDS secrets of their transport sockets, then one health check
//     round); the data plane asks for listeners (LDS) only once they all did (the LDS subscription
//     is an init target that starts when the cluster manager's initialized callback fires).
//  2. The listener warms until its route configuration (RDS) and every SDS secret its TLS context
//     names arrived.
//  3. Only then is its socket put into listen(): until then a connection is refused.
//
// Later (once a listener served), a listener update warms the same way while the active listener
// keeps serving (ListenerManagerImpl::addOrUpdateListenerInternal "add warming listener",
// onListenerWarmed), and a cluster added or changed warms on its own (clustermanager.go).

// clusterManagerInitialized reports whether the cluster manager finished its initialization.
func (d *DataPlane) clusterManagerInitialized() bool {
	select {
	case <-d.cmInit:
		return true
	default:
		return false
	}
}

// cdsHandled records that the first CDS response was handled. Envoy's CDS init target completes
// on the first response whether it was accepted or rejected (CdsApiImpl::onConfigUpdateFailed
// lets server startup continue).
func (d *DataPlane) cdsHandled() {
	d.cdsDone.Store(true)
	d.checkClusterInit()
}

// checkClusterInit closes cmInit once the first CDS response was handled and no cluster is
// warming, and then lets a waiting listener become active.
func (d *DataPlane) checkClusterInit() {
	if !d.cdsDone.Load() || !d.clusters.warm() {
		return
	}
	d.cmInitOnce.Do(func() {
		close(d.cmInit)
		d.logf("all clusters initialized")
	})
	d.maybeActivate()
}

// maybeActivate makes the warming listener the active one once it is warm: the cluster manager
// initialized (this matters before the first listener only), its route configuration and every
// SDS secret its TLS context names are there. The first activation puts the bound socket into
// listen() and starts serving.
func (d *DataPlane) maybeActivate() {
	if !d.clusterManagerInitialized() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.warming
	if w == nil || d.ctx.Err() != nil || d.routeConfig(w.routeName) == nil {
		return
	}
	for _, n := range w.secrets {
		if !d.secrets.has(n) {
			return
		}
	}
	d.warming = nil
	if d.server == nil {
		if d.bound == nil {
			return // closed
		}
		lis, err := d.bound.listen()
		d.bound = nil
		if err != nil {
			// ListenerManagerImpl::onListenerWarmed: a failed final pre-worker init removes the
			// listener.
			d.logf("listener: %v; not serving", err)
			return
		}
		if d.conns != nil {
			lis = d.conns.wrap(lis, d.logf)
		}
		d.chain.Store(w)
		// The TLS config is taken per connection so a listener update applies to new connections.
		d.tlsSwap = new(atomic.Pointer[tls.Config])
		d.tlsSwap.Store(w.tls)
		current := d.tlsSwap
		srv := &http.Server{
			Handler:           http.HandlerFunc(d.serveHTTP),
			ReadHeaderTimeout: w.hcm.GetRequestHeadersTimeout().AsDuration(),
			TLSConfig: &tls.Config{NextProtos: w.tls.NextProtos, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				return current.Load().GetConfigForClient(hello)
			}},
			ErrorLog: discardLog,
		}
		d.server = srv
		d.connectTimeout = new(atomic.Int64)
		d.connectTimeout.Store(int64(w.connectTimeout))
		d.handshakes = newHandshakeListener(lis, srv.TLSConfig, d.connectTimeout, d.logf)
		go srv.Serve(d.handshakes)
		d.logf("listener warmed: serving on %s", d.addr)
		d.readyOne.Do(func() { close(d.ready) })
		return
	}
	d.tlsSwap.Store(w.tls)
	d.connectTimeout.Store(int64(w.connectTimeout))
	d.chain.Store(w)
	d.logf("listener update warmed and active")
}

// boundSocket is the listener's socket, bound but not yet listening: a connection to it is
// refused, as to Envoy's listen socket before doFinalPreWorkerInit.
type boundSocket struct {
	fd   int
	addr string
}

// bindTCP creates a TCP socket bound to the IP address and port (0: any free port), with
// SO_REUSEADDR as Envoy's listeners set it.
func bindTCP(host string, port int) (*boundSocket, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("listener address %q is not an IP address", host)
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(nil)
	if ip4 := ip.To4(); ip4 != nil {
		s := &unix.SockaddrInet4{Port: port}
		copy(s.Addr[:], ip4)
		family, sa = unix.AF_INET, s
	} else {
		s := &unix.SockaddrInet6{Port: port}
		copy(s.Addr[:], ip.To16())
		sa = s
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listener socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listener socket: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	var addr string
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return &boundSocket{fd: fd, addr: addr}, nil
}

// listen puts the socket into listen() and hands it to Go; the boundSocket is spent either way.
func (b *boundSocket) listen() (net.Listener, error) {
	f := os.NewFile(uintptr(b.fd), "listener")
	defer f.Close() // FileListener holds its own copy
	if err := unix.Listen(b.fd, unix.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("listen %s: %w", b.addr, err)
	}
	return net.FileListener(f)
}

func (b *boundSocket) close() { unix.Close(b.fd) }
