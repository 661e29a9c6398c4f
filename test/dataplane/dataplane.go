package dataplane

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/utils/clock"
)

// Protocol is the xDS transport variant the data plane speaks over ADS.
type Protocol string

const (
	// Delta is incremental xDS (DELTA_GRPC), the api_type of skewgate's bootstrap.
	Delta Protocol = "delta"
	// SotW is state-of-the-world xDS (GRPC).
	SotW Protocol = "sotw"
)

// DefaultEnvoyVersion is the Envoy release the data plane announces in node.user_agent_build_version
// unless Config.EnvoyVersion says otherwise.
const DefaultEnvoyVersion = "1.40.0"

// Name is how the data plane names itself in logs and test output.
const Name = "test data plane standing in for Envoy"

// Config tells the data plane where its control plane is.
type Config struct {
	// XDSAddress is skewgate's xDS server (plaintext, loopback).
	XDSAddress string
	NodeID     string
	// NodeCluster is node.cluster [skewgate-front].
	NodeCluster string
	// Protocol is the ADS variant [Delta, as the bootstrap's api_type DELTA_GRPC].
	Protocol Protocol
	// EnvoyVersion is sent as node.user_agent_build_version (major.minor.patch) with
	// node.user_agent_name "envoy", as Envoy does [DefaultEnvoyVersion].
	EnvoyVersion string
	// Seed seeds every random choice (host picks, tie breaks, retry back-off, start of round
	// robin). 0: a random seed, logged so that a run can be reproduced.
	Seed uint64
	// Bootstrap is the bootstrap Envoy would start with; the stand-in reads its downstream
	// connection limit (connlimit.go) and nothing else from it. Nil: no limit.
	Bootstrap *bootstrapv3.Bootstrap
	Logf      func(format string, args ...any)
	// Clock times ext_proc's message_timeout [the real clock]; tests step a fake one past it
	// instead of making the processor sleep.
	Clock clock.Clock
}

// DataPlane is a running test data plane.
type DataPlane struct {
	cfg      Config
	seed     uint64
	rngMu    sync.Mutex
	rng      *rand.Rand
	clusters clusterManager
	secrets  *secretStore
	// routes are the accepted route configurations by name (RDS).
	routes atomic.Pointer[map[string]*routev3.RouteConfiguration]
	// chain is the active listener: the one connections are served with.
	chain atomic.Pointer[chain]
	// cmInit is closed once the cluster manager initialized: the first CDS response was handled
	// and every cluster it (or a later update before then) brought finished initializing.
	cmInit     chan struct{}
	cmInitOnce sync.Once
	cdsDone    atomic.Bool

	mu sync.Mutex
	// warming is the listener of the last accepted LDS response while it waits for its route
	// configuration and secrets (and, before the first listener serves, for the cluster manager).
	warming  *chain
	bound    *boundSocket // the listener's socket, bound but not listening yet
	server   *http.Server
	addr     string
	ready    chan struct{} // closed once the first listener serves
	readyOne sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	tlsSwap  *atomic.Pointer[tls.Config]
	// connectTimeout is the active filter chain's transport_socket_connect_timeout, handshakes the
	// listener that completes TLS handshakes under it (handshake.go).
	connectTimeout *atomic.Int64
	handshakes     *handshakeListener
	conns          *connLimit
}

// Seed is the seed of this run's random choices.
func (d *DataPlane) Seed() uint64 { return d.seed }

// String says what this is, for test output.
func (d *DataPlane) String() string { return fmt.Sprintf("%s (seed %d)", Name, d.seed) }

// intn is a seeded random number in [0, n).
func (d *DataPlane) intn(n int) int {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.IntN(n)
}

func (d *DataPlane) logf(format string, args ...any) {
	d.cfg.Logf("["+Name+"] "+format, args...)
}

// Start connects to the xDS server and returns once the listener serves (or ctx ends).
func Start(ctx context.Context, cfg Config) (*DataPlane, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Protocol == "" {
		cfg.Protocol = Delta
	}
	if cfg.Protocol != Delta && cfg.Protocol != SotW {
		return nil, fmt.Errorf("dataplane: unknown xDS protocol %q", cfg.Protocol)
	}
	if cfg.EnvoyVersion == "" {
		cfg.EnvoyVersion = DefaultEnvoyVersion
	}
	if _, err := parseVersion(cfg.EnvoyVersion); err != nil {
		return nil, err
	}
	if cfg.NodeCluster == "" {
		cfg.NodeCluster = "skewgate-front"
	}
	seed := cfg.Seed
	for seed == 0 {
		var b [8]byte
		crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	conns, err := newConnLimit(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(cfg.XDSAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	d := &DataPlane{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		ready: make(chan struct{}), cmInit: make(chan struct{}), ctx: rctx, cancel: cancel, done: make(chan struct{}), conns: conns}
	d.secrets = newSecretStore(rctx, d.logf)
	d.clusters = clusterManager{active: map[string]*cluster{}, warming: map[string]*cluster{}}
	d.logf("test data plane standing in for Envoy (seed %d); Envoy %s over %s xDS", seed, cfg.EnvoyVersion, cfg.Protocol)
	go func() {
		defer close(d.done)
		defer conn.Close()
		for rctx.Err() == nil {
			var err error
			if cfg.Protocol == Delta {
				err = d.subscribeDelta(rctx, conn)
			} else {
				err = d.subscribeSotW(rctx, conn)
			}
			if err != nil && rctx.Err() == nil {
				d.logf("xDS stream ended: %v; reconnecting", err)
				select {
				case <-rctx.Done():
				case <-time.After(200 * time.Millisecond): // back-off before redialing, as Envoy does
				}
			}
		}
	}()
	select {
	case <-d.ready:
		return d, nil
	case <-ctx.Done():
		d.Close()
		return nil, fmt.Errorf("dataplane: no listener from xDS: %w", ctx.Err())
	}
}

// parseVersion reads "major.minor.patch".
func parseVersion(v string) ([3]uint32, error) {
	var out [3]uint32
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, fmt.Errorf("dataplane: Envoy version %q is not major.minor.patch", v)
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return out, fmt.Errorf("dataplane: Envoy version %q: %v", v, err)
		}
		out[i] = uint32(n)
	}
	return out, nil
}

// Addr is the address the listener is bound to.
func (d *DataPlane) Addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addr
}

// Close stops the listener, the health checks and the xDS stream.
func (d *DataPlane) Close() {
	d.cancel()
	<-d.done
	d.mu.Lock()
	if d.server != nil {
		d.server.Close()
	}
	if d.bound != nil {
		d.bound.close()
		d.bound = nil
	}
	d.mu.Unlock()
	d.clusters.stopAll()
}
