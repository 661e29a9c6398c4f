package grpcutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// Who may open a connection to skewgate's gRPC servers. Both serve only the Envoy skewgate
// configures: xDS hands out the whole front's configuration and steers which Topology ext_proc
// decides with (a stream counts for the ACK gate), and ext_proc answers merged discovery and OpenAPI
// documents once its client reports that an apiserver authorized the request. Neither can tell a
// real Envoy from a program that speaks its protocol, so the transport decides:
//   - a unix socket: the peer's uid, from the kernel (SO_PEERCRED, unix(7)), must be skewgate's own
//     effective uid or one of Peers.UIDs;
//   - TCP: mTLS (the client certificate chains to --grpc-client-ca-file), or, only when
//     PlaintextLoopback is set (development and tests), plaintext from a loopback address, which any
//     local user and any host-network pod can open.
//
// Everything else is refused before a byte of gRPC is read. grpc's own credentials/local accepts
// loopback TCP and unix sockets alike and checks no peer, which is the gap this closes.

// Refusal reasons (the reason label of skewgate_grpc_refused_connections_total).
const (
	RefusedPeerUID      = "peer_uid"
	RefusedNoPeerCred   = "no_peer_credentials"
	RefusedPlaintextTCP = "plaintext_tcp"
)

var refusalReasons = []string{RefusedPeerUID, RefusedNoPeerCred, RefusedPlaintextTCP}

// PlaintextLoopbackFlag is the flag that lets plaintext gRPC on loopback TCP through.
const PlaintextLoopbackFlag = "--grpc-plaintext-loopback"

// Peers says who may connect.
type Peers struct {
	// UIDs may connect over a unix socket besides skewgate's own effective uid.
	UIDs []uint32
	// PlaintextLoopback accepts plaintext connections from loopback addresses over TCP.
	PlaintextLoopback bool
}

// NewCredentials returns the transport credentials of the gRPC server named server ("xds",
// "extproc"): next (TLS; nil for plaintext) once the peer passes p. refused may be nil.
func NewCredentials(server string, p Peers, next credentials.TransportCredentials, refused *prometheus.CounterVec, log *zap.Logger) credentials.TransportCredentials {
	if log == nil {
		log = zap.NewNop()
	}
	c := &peerCreds{server: server, peers: p, next: next, log: log, logged: map[string]bool{}}
	c.uids = append([]uint32{ownUID()}, p.UIDs...)
	if refused != nil {
		for _, r := range refusalReasons {
			refused.WithLabelValues(server, r)
		}
		c.refused = func(reason string) { refused.WithLabelValues(server, reason).Inc() }
	} else {
		c.refused = func(string) {}
	}
	return c
}

type peerCreds struct {
	server  string
	peers   Peers
	uids    []uint32
	next    credentials.TransportCredentials
	refused func(reason string)
	log     *zap.Logger

	mu     sync.Mutex
	logged map[string]bool
}

// maxLoggedRefusals bounds the reason+uid pairs remembered for logging a refusal once.
const maxLoggedRefusals = 1024

// ErrRefused wraps every refusal.
var ErrRefused = errors.New("skewgate: connection refused")

// unixAuthInfo is what a connection over a unix socket proved: its peer's uid.
type unixAuthInfo struct {
	credentials.CommonAuthInfo
	UID uint32
}

func (unixAuthInfo) AuthType() string { return "unix-peer-credentials" }

type loopbackAuthInfo struct{ credentials.CommonAuthInfo }

func (loopbackAuthInfo) AuthType() string { return "plaintext-loopback" }

func (c *peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := c.check(conn); err != nil {
		return nil, nil, err
	}
	if c.next != nil {
		return c.next.ServerHandshake(conn)
	}
	if uc, ok := conn.(*net.UnixConn); ok {
		uid, _ := peerUID(uc)
		return conn, unixAuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, UID: uid}, nil
	}
	return conn, loopbackAuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

// check admits conn or says why not.
func (c *peerCreds) check(conn net.Conn) error {
	if uc, ok := conn.(*net.UnixConn); ok {
		uid, err := peerUID(uc)
		if err != nil {
			return c.refuse(RefusedNoPeerCred, "", fmt.Errorf("%w: reading the unix socket peer's credentials: %v", ErrRefused, err))
		}
		if !slices.Contains(c.uids, uid) {
			return c.refuse(RefusedPeerUID, fmt.Sprint(uid), fmt.Errorf("%w: unix socket peer uid %d is not skewgate's own (%d) nor given with --grpc-peer-uid", ErrRefused, uid, c.uids[0]))
		}
		return nil
	}
	if c.next != nil {
		return nil // mTLS decides
	}
	addr, ok := conn.RemoteAddr().(*net.TCPAddr)
	switch {
	case !ok:
		return c.refuse(RefusedPlaintextTCP, "", fmt.Errorf("%w: plaintext over %s: only unix sockets, mTLS, or loopback TCP with %s", ErrRefused, conn.RemoteAddr().Network(), PlaintextLoopbackFlag))
	case !addr.IP.IsLoopback():
		return c.refuse(RefusedPlaintextTCP, "", fmt.Errorf("%w: plaintext gRPC from %s, off this host: give --grpc-cert-file, --grpc-key-file and --grpc-client-ca-file", ErrRefused, addr.IP))
	case !c.peers.PlaintextLoopback:
		return c.refuse(RefusedPlaintextTCP, "", fmt.Errorf("%w: plaintext gRPC on loopback TCP is open to every local user and host-network pod: use a unix socket or mTLS, or %s for development and tests", ErrRefused, PlaintextLoopbackFlag))
	}
	return nil
}

func (c *peerCreds) refuse(reason, uid string, err error) error {
	c.refused(reason)
	key := reason + "\x00" + uid
	c.mu.Lock()
	first := !c.logged[key]
	if first {
		if len(c.logged) >= maxLoggedRefusals {
			clear(c.logged)
		}
		c.logged[key] = true
	}
	c.mu.Unlock()
	if first {
		c.log.Warn("refused a gRPC connection", zap.String("server", c.server), zap.String("reason", reason), zap.Error(err))
	}
	return err
}

func (c *peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("grpcutil: server-side credentials")
}

func (c *peerCreds) Info() credentials.ProtocolInfo {
	if c.next != nil {
		return c.next.Info()
	}
	return credentials.ProtocolInfo{SecurityProtocol: "local"}
}

func (c *peerCreds) Clone() credentials.TransportCredentials {
	n := &peerCreds{server: c.server, peers: c.peers, uids: slices.Clone(c.uids), refused: c.refused, log: c.log, logged: map[string]bool{}}
	if c.next != nil {
		n.next = c.next.Clone()
	}
	return n
}

//nolint:staticcheck // part of the interface
func (c *peerCreds) OverrideServerName(string) error { return nil }
