package xds

import (
	"context"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"

	"github.com/skewgate/skewgate/discovery"
)

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
