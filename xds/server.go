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
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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
	if err := cfg.Options.Validate(); err != nil {
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

// publish translates t and sets the snapshot. It returns when the next retained cluster expires
// (zero if none is retained).
func (s *Server) publish(ctx context.Context, t *discovery.Topology) time.Time {
	start := s.cfg.Clock.Now()
	rs, err := Translate(t, s.cfg.Options)
	if err != nil {
		s.failed("translation failed; Envoy keeps the last good configuration", err, zap.String("topology", topologyVersion(t)))
		return s.nextExpiry()
	}
	s.retain(rs)
	resources := snapshotResources(rs)
	hash := s.hasher.sum(resources)
	if hash == s.lastHash {
		// The same snapshot: t decides exactly as the Topology it was translated from.
		s.acks.replaceLatest(t)
		s.m.publishes.WithLabelValues(publishUnchanged).Inc()
		return s.nextExpiry()
	}
	version, err := s.setSnapshot(ctx, t, rs, resources)
	if err != nil {
		s.failed("snapshot rejected; Envoy keeps the last good configuration", err)
		return s.nextExpiry()
	}
	s.lastHash = hash
	s.m.publishes.WithLabelValues(publishOK).Inc()
	s.m.translate.Observe(s.cfg.Clock.Since(start).Seconds())
	s.announce(version, t, rs)
	return s.nextExpiry()
}

// failed counts and logs a publication that left the last snapshot in place.
func (s *Server) failed(msg string, err error, fields ...zap.Field) {
	s.m.publishes.WithLabelValues(publishFailed).Inc()
	s.log.Error(msg, append(fields, zap.Error(err))...)
}

// retain adds to rs the clusters that left the Topology and are still in their grace period, so
// they keep serving requests already routed to them; a cluster that comes back is current again.
// rs.Clusters stay sorted by name.
func (s *Server) retain(rs *Resources) {
	now := s.cfg.Clock.Now()
	current := make(map[string]*clusterv3.Cluster, len(rs.Clusters))
	for _, c := range rs.Clusters {
		current[c.Name] = c
		delete(s.retained, c.Name)
	}
	for name, c := range s.last {
		if current[name] == nil {
			s.retained[name] = retainedCluster{c: c, until: now.Add(s.cfg.Grace)}
		}
	}
	s.last = current
	for name, r := range s.retained {
		if !now.Before(r.until) {
			delete(s.retained, name)
			continue
		}
		rs.Clusters = append(rs.Clusters, r.c)
	}
	s.m.retained.Set(float64(len(s.retained)))
	slices.SortFunc(rs.Clusters, func(a, b *clusterv3.Cluster) int { return cmpString(a.Name, b.Name) })
}

// snapshotResources are the resources of rs by type, as a snapshot holds them.
func snapshotResources(rs *Resources) map[resourcev3.Type][]types.Resource {
	return map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType:  toResources(rs.Clusters),
		resourcev3.RouteType:    toResources(rs.Routes),
		resourcev3.ListenerType: toResources(rs.Listeners),
		resourcev3.SecretType:   toResources(rs.Secrets),
	}
}

// setSnapshot hands resources, translated from t, to the snapshot cache under the next version.
// The ACK gate learns the version's clusters before any Envoy can acknowledge them.
func (s *Server) setSnapshot(ctx context.Context, t *discovery.Topology, rs *Resources, resources map[resourcev3.Type][]types.Resource) (string, error) {
	s.seq++
	version := s.cfg.VersionPrefix + "-" + strconv.Itoa(s.seq)
	snap, err := cachev3.NewSnapshot(version, resources)
	if err != nil {
		return "", err
	}
	if err := snap.Consistent(); err != nil {
		return "", err
	}
	s.acks.publish(version, rs.ClusterNames(), t)
	return version, s.cache.SetSnapshot(ctx, nodeGroup, snap)
}

// announce reports a published snapshot: metrics, logs (a warning per decision the route table
// cannot carry) and the watchers of Version.
func (s *Server) announce(version string, t *discovery.Topology, rs *Resources) {
	s.m.clusters.Set(float64(len(rs.Clusters)))
	s.log.Info("published", zap.String("version", version), zap.String("topology", topologyVersion(t)),
		zap.Int("clusters", len(rs.Clusters)), zap.Int("retained", len(s.retained)))
	s.m.unexpressed.Set(float64(len(rs.Unexpressed)))
	for _, u := range rs.Unexpressed {
		s.log.Warn("decision without a route of its own in Envoy: ext_proc decides it; failing open it takes the default (or schema) route",
			zap.String("version", version), zap.String("key", u.String()), zap.String("reason", u.Reason))
	}
	s.mu.Lock()
	s.version = version
	s.unexpressed = rs.Unexpressed
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *Server) nextExpiry() time.Time {
	var next time.Time
	for _, r := range s.retained {
		if next.IsZero() || r.until.Before(next) {
			next = r.until
		}
	}
	return next
}

func toResources[M types.Resource](in []M) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
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
