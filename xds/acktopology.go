package xds

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/discovery"
)

// Which Topology ext_proc decides with. A decision names clusters, and a request Envoy sends to a
// cluster it does not have yet gets a 503; a decision from a Topology Envoy never received also
// overrides the route table Envoy keeps, whose skew routes are right for the Topology it has. So
// ext_proc decides with the newest Topology whose snapshot every counted Envoy has acknowledged
// (its clusters: the CDS ACK), and with none (Server.Current returns nil: ext_proc names no cluster
// and Envoy's own route table decides) while a counted Envoy has acknowledged nothing from this
// process or none is counted. That covers a restarted skewgate, whose first snapshot the Envoy has
// not acknowledged yet while it still serves with the config of the previous process, even when the
// Topology changed across the restart.
//
// Which streams count. Any client that reaches the xDS endpoint can open a stream, so a stream
// counts only once its first request passed the version gate (version.go), and only while it keeps
// acknowledging: a stream that has not acknowledged a snapshot within ackTimeout of its publication
// (or of the stream's first request, when later) stops counting, is logged and counted
// (skewgate_xds_ack_timeouts_total), and counts again once it has the latest snapshot. A stream that
// NACKed the latest snapshot answered it: it is alive and serves with what it acknowledged before,
// so it keeps counting at that version, with no deadline (otherwise one Envoy refusing a snapshot
// would leave ext_proc with no Topology at all after the timeout, or, beside other Envoys, naming
// clusters it does not have). Without the
// bound a stream that says nothing would keep ext_proc from naming any cluster, and one that
// acknowledges a snapshot and goes quiet would pin ext_proc to that snapshot's Topology, whose
// decisions override the skew routes of the Envoys that moved on. Envoy sends its ACK as soon as it
// has applied a response, before new clusters finish warming: SotW GrpcMuxImpl::onDiscoveryResponse
// queues the ACK right after processDiscoveryResources returns
// (source/extensions/config_subscription/grpc/grpc_mux_impl.cc), delta
// NewGrpcMuxImpl::onDiscoveryResponse calls kickOffAck on handleResponse's result
// (new_grpc_mux_impl.cc; both read on main-branch copies of 2025-2026, between 1.37 and 1.40, named
// in test/dataplane/CONFORMANCE.md rows 26 and 26a). A live
// Envoy answers in milliseconds; the bound is far above anything it needs.

// DefaultAckTimeout is how long a stream may go without acknowledging the latest snapshot before it
// stops holding ext_proc back.
const DefaultAckTimeout = 30 * time.Second

// has returns the index in a.order of the newest version s has, -1 if none. A stream has the version
// whose clusters it acknowledged, and every later one whose clusters are all among those: over delta
// xDS Envoy is sent (and acknowledges) clusters only when they change (go-control-plane's delta cache
// sends the resources whose hash changed), so a snapshot that changed only routes is never
// acknowledged as CDS, yet every cluster a decision from it names is in that Envoy.
func (a *acks) has(s *stream) int {
	i := slices.Index(a.order, s.acked)
	if i < 0 {
		return -1 // nothing acknowledged yet, or a version too old to remember
	}
	for j := len(a.order) - 1; j > i; j-- {
		if subset(a.published[a.order[j]].clusters, s.clusters) {
			return j
		}
	}
	return i
}

// gated returns the streams that count, marks the ones whose time is up as lagging (a log line and
// a metric each time one starts lagging) and arms the timer for the next one. Called with a.mu held.
func (a *acks) gated() []*stream {
	now := a.clock.Now()
	var next time.Time
	counted := make([]*stream, 0, len(a.streams))
	for _, s := range a.streams {
		if !s.admitted {
			continue
		}
		i := a.has(s)
		if i == len(a.order)-1 {
			a.catchUp(s, "an xDS stream acknowledged the latest snapshot; ext_proc follows it again")
			counted = append(counted, s)
			continue
		}
		if latest := a.order[len(a.order)-1]; s.refused == latest && i >= 0 {
			a.catchUp(s, "an xDS stream refused the latest snapshot; ext_proc decides with what it acknowledged before")
			counted = append(counted, s)
			continue
		}
		if s.lagging {
			continue
		}
		deadline := a.published[a.order[i+1]].at // the oldest version it lacks
		if s.since.After(deadline) {
			deadline = s.since
		}
		deadline = deadline.Add(a.timeout)
		if now.Before(deadline) {
			if next.IsZero() || deadline.Before(next) {
				next = deadline
			}
			counted = append(counted, s)
			continue
		}
		s.lagging = true
		a.m.ackTimeouts.Inc()
		a.m.laggingStreams.Inc()
		a.log.Warn("an xDS stream has not acknowledged the latest snapshot in time; ext_proc no longer waits for it until it does",
			zap.String("node", s.node), zap.String("acked", s.acked), zap.String("latest", a.order[len(a.order)-1]),
			zap.Duration("timeout", a.timeout))
	}
	if a.expiry != nil {
		a.expiry.Stop()
		a.expiry = nil
	}
	if !next.IsZero() {
		// The callback runs on the clock's goroutine (a fake clock's Step, in tests, holds its own
		// lock while it calls it): take a.mu on another one.
		a.expiry = a.clock.AfterFunc(next.Sub(now), func() { go a.expire() })
	}
	a.m.gatedStreams.Set(float64(len(counted)))
	return counted
}

// catchUp ends s's lagging, if it was, with msg logged. Called with a.mu held.
func (a *acks) catchUp(s *stream, msg string) {
	if !s.lagging {
		return
	}
	s.lagging = false
	a.m.laggingStreams.Dec()
	a.log.Info(msg, zap.String("node", s.node))
}

func (a *acks) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recompute()
}

// everyEnvoyHas returns the index in a.order of the newest version every counted stream has, -1 if
// none. A stream has a version older than its own (another stream holds ext_proc back) only if every
// cluster of that version is still among the clusters it acknowledged: a cluster that left after its
// grace period is gone from an Envoy that acknowledged the snapshot without it, so a Topology that
// names it waits (nil: Envoy's route table decides) rather than name a cluster that Envoy lacks.
// Called with a.mu held.
func (a *acks) everyEnvoyHas(counted []*stream) int {
	if len(counted) == 0 {
		return -1
	}
	oldest := len(a.order)
	for _, s := range counted {
		i := a.has(s)
		if i < 0 {
			return -1
		}
		oldest = min(oldest, i)
	}
	for ; oldest >= 0; oldest-- {
		clusters := a.published[a.order[oldest]].clusters
		if !slices.ContainsFunc(counted, func(s *stream) bool { return !subset(clusters, s.clusters) }) {
			return oldest
		}
	}
	return -1
}

func subset(a, b map[string]bool) bool {
	for c := range a {
		if !b[c] {
			return false
		}
	}
	return true
}

// replaceLatest records that t translates to the latest published snapshot too (a Topology that
// changed nothing Envoy sees): ext_proc may decide with it once that snapshot is acknowledged.
func (a *acks) replaceLatest(t *discovery.Topology) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.order) == 0 {
		return
	}
	latest := a.order[len(a.order)-1]
	pub := a.published[latest]
	pub.topology = t
	a.published[latest] = pub
	a.recompute()
}

// currentTopology is the Topology ext_proc decides with (lock-free: read per request).
func (a *acks) currentTopology() *discovery.Topology { return a.current.Load() }
