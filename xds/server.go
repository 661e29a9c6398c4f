package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryservice "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
)

// TopologySource is what the xDS server needs from discovery.
type TopologySource interface {
	// Watch returns the current Topology (nil before the first) and a channel closed when it is
	// replaced.
	Watch() (*discovery.Topology, <-chan struct{})
}

// Config configures a Server.
type Config struct {
	Options Options
	Source  TopologySource
	// Grace keeps a cluster that left the Topology in the snapshot this long, so requests routed to it
	// just before the change still find it [60s].
	Grace    time.Duration
	Logger   *zap.Logger
	Registry prometheus.Registerer
	// VersionPrefix starts every snapshot version [the start time in nanoseconds, base 36], so
	// versions never repeat across restarts: go-control-plane's snapshot cache answers a
	// state-of-the-world request only when its version_info differs from the snapshot's
	// (pkg/cache/v3/simple.go, CreateWatch), so an Envoy reconnecting with a reused version would get
	// nothing.
	VersionPrefix string
	// Clock is the server's one clock: the grace period, ACK times and the ACK timeout, durations
	// [the real clock]; AckTimeout is how long a stream may go without acknowledging a snapshot
	// before ext_proc stops waiting for it [DefaultAckTimeout].
	Clock      clock.WithDelayedExecution
	AckTimeout time.Duration
}

// nodeGroup is the single snapshot key: every Envoy in front of one control plane gets the same
// configuration, whatever its node id.
const nodeGroup = "skewgate"

type constHash struct{}

func (constHash) ID(*corev3.Node) string { return nodeGroup }

// Server publishes the Topology to Envoys over ADS.
type Server struct {
	cfg   Config
	log   *zap.Logger
	m     *metrics
	cache cachev3.SnapshotCache
	acks  *acks
	gate  *versionGate
	xds   serverv3.Server

	seq      int
	hasher   *merkle
	lastHash string
	// retained holds clusters that left the Topology, until their time is up.
	retained map[string]retainedCluster
	// last holds the clusters of the last snapshot that are in the Topology, to retain when they leave.
	last map[string]*clusterv3.Cluster

	mu      sync.Mutex
	version string
	changed chan struct{}
	// unexpressed are the rows of the decision table the published snapshot has no route of its own
	// for (skewed resource keys, OpenAPI v3 documents).
	unexpressed []UnexpressedKey
}

type retainedCluster struct {
	c     *clusterv3.Cluster
	until time.Time
}

// New validates cfg and returns a Server; Run publishes, Register serves.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Source == nil {
		return nil, errors.New("xds: no Topology source")
	}
	cfg.Options = cfg.Options.WithDefaults()
	if err := validateOptions(cfg.Options); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.VersionPrefix == "" {
		cfg.VersionPrefix = strconv.FormatInt(cfg.Clock.Now().UnixNano(), 36)
	}
	log := cfg.Logger.Named("xds")
	m := newMetrics(cfg.Registry)
	s := &Server{
		cfg: cfg, log: log, m: m,
		cache:    newSnapshotCache(zapLogger{log.Named("cache")}), // snapshotcache.go: SotW SDS answered by name
		acks:     newAcks(log, m, cfg.Clock, cfg.AckTimeout),
		hasher:   newMerkle(),
		retained: map[string]retainedCluster{},
		last:     map[string]*clusterv3.Cluster{},
		changed:  make(chan struct{}),
	}
	s.gate = newVersionGate(callbacks{s.acks}, log, m)
	s.xds = serverv3.NewServer(ctx, s.cache, s.gate)
	return s, nil
}

// Register adds the ADS service (state of the world and delta) and the per-type services to g.
func (s *Server) Register(g *grpc.Server) {
	discoveryservice.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
	secretservice.RegisterSecretDiscoveryServiceServer(g, s.xds)
}

// Current returns the Topology ext_proc decides with, the one ACK gate: the newest one whose
// snapshot every connected Envoy has acknowledged, nil while there is none (acktopology.go). Every
// cluster its decisions name is in every counted Envoy; ext_proc reads nothing else.
func (s *Server) Current() *discovery.Topology { return s.acks.currentTopology() }

// Unexpressed lists the rows of the decision table (skewed resource keys, OpenAPI v3 documents) that
// have no route of their own in the published snapshot's route table, with the reason.
func (s *Server) Unexpressed() []UnexpressedKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unexpressed)
}

// Version returns the last published snapshot version ("" before the first) and a channel closed at
// the next publication.
func (s *Server) Version() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.changed
}

// Run publishes a snapshot for every new Topology, and again when retained clusters expire, until
// ctx ends. Before the first Topology it publishes nothing: an Envoy that connects then (one that
// reconnects to a restarted skewgate, typically) gets no response and keeps the configuration it
// has, instead of trading its working clusters for an empty front that answers 503 until discovery
// has synced.
func (s *Server) Run(ctx context.Context) error {
	var expiry clock.Timer
	for {
		t, changed := s.cfg.Source.Watch()
		if t == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		next := s.publish(ctx, t)
		if expiry != nil {
			expiry.Stop()
		}
		var expired <-chan time.Time
		if !next.IsZero() {
			expiry = s.cfg.Clock.NewTimer(next.Sub(s.cfg.Clock.Now()))
			expired = expiry.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-expired:
		}
	}
}

func topologyVersion(t *discovery.Topology) string {
	if t == nil {
		return "none"
	}
	return t.Version
}

// zapLogger adapts zap to go-control-plane's logger; its chatter is debug level.
type zapLogger struct{ l *zap.Logger }

func (z zapLogger) Debugf(f string, a ...any) { z.l.Sugar().Debugf(f, a...) }
func (z zapLogger) Infof(f string, a ...any)  { z.l.Sugar().Debugf(f, a...) }
func (z zapLogger) Warnf(f string, a ...any)  { z.l.Sugar().Warnf(f, a...) }
func (z zapLogger) Errorf(f string, a ...any) { z.l.Sugar().Errorf(f, a...) }
