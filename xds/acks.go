package xds

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
)

// keptVersions bounds how many published cluster sets are remembered for matching ACKs.
const keptVersions = 64

type push struct {
	typeURL, version string
	at               time.Time
}

type stream struct {
	node string
	// admitted is set by the stream's first request, which reaches acks only once it passed the
	// version gate (version.go); since is when. Until then the stream counts for nothing.
	admitted bool
	since    time.Time
	// lagging is set while the stream has not acknowledged a snapshot within ackTimeout of its
	// publication: it counts for nothing until it has the latest snapshot (acktopology.go).
	lagging bool
	pending map[string]push // by nonce
	// clusters is the cluster set of the last CDS version this stream ACKed, acked that version;
	// nil and "" before the first.
	clusters map[string]bool
	acked    string
	// refused is the latest snapshot version this stream NACKed (any type): an Envoy that answers
	// the latest snapshot, if only to refuse it, is alive and serving with what it has.
	refused string
	// nacked is, per type URL we sent, a digest of the version and detail of the latest NACK not
	// followed by an ACK. It is all that is remembered of NACKs: one entry per type, dropped with
	// the stream, so an Envoy that keeps rejecting (or sends ever-new details) cannot grow memory.
	nacked map[string][sha256.Size]byte
}

// maxNodeID bounds the node id kept per stream (only used in log lines).
const maxNodeID = 256

// maxNackDetail bounds how much of an Envoy's error detail is logged.
const maxNackDetail = 4 << 10

// publication is what a published snapshot version holds that acks needs: its cluster names, and
// the Topology it was translated from (acktopology.go).
type publication struct {
	clusters map[string]bool
	topology *discovery.Topology
	at       time.Time
}

// acks follows every xDS stream and owns the one ACK gate: the Topology every counted Envoy has
// acknowledged (acktopology.go), which is the only Topology ext_proc reads. Every cluster a decision
// from it names is in every counted Envoy (make-before-break): a cluster created by a Topology change
// is named only once the Envoys have it, so a request never meets "cluster not found".
type acks struct {
	log   *zap.Logger
	m     *metrics
	clock clock.WithDelayedExecution
	// timeout bounds how long a stream may hold ext_proc back without acknowledging a snapshot.
	timeout time.Duration

	mu        sync.Mutex
	expiry    clock.Timer            // the next time a stream starts lagging
	streams   map[streamKey]*stream  // SotW and delta streams are numbered apart
	published map[string]publication // by snapshot version
	order     []string               // published versions, oldest first

	current atomic.Pointer[discovery.Topology]
}

func newAcks(log *zap.Logger, m *metrics, clk clock.WithDelayedExecution, timeout time.Duration) *acks {
	return &acks{log: log, m: m, clock: clk, timeout: timeout, streams: map[streamKey]*stream{}, published: map[string]publication{}}
}

// published records the clusters of a new snapshot version, translated from t.
func (a *acks) publish(version string, clusters []string, t *discovery.Topology) {
	set := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		set[c] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.published[version] = publication{clusters: set, topology: t, at: a.clock.Now()}
	a.order = append(a.order, version)
	if len(a.order) > keptVersions {
		delete(a.published, a.order[0])
		a.order = a.order[1:]
	}
	a.recompute()
}

// recompute publishes the Topology ext_proc decides with: the newest every counted stream (gated,
// acktopology.go) has, nil while there is none. Called with a.mu held.
func (a *acks) recompute() {
	i := a.everyEnvoyHas(a.gated())
	if i < 0 {
		a.current.Store(nil)
		a.m.readyClusters.Set(0)
		return
	}
	pub := a.published[a.order[i]]
	a.current.Store(pub.topology)
	a.m.readyClusters.Set(float64(len(pub.clusters)))
}

func (k streamKey) mode() string {
	if k.delta {
		return modeDelta
	}
	return modeSotW
}

func (a *acks) open(id streamKey) {
	a.mu.Lock()
	// Opening counts for nothing: the stream's first request must pass the version gate (received).
	a.streams[id] = &stream{pending: map[string]push{}, nacked: map[string][sha256.Size]byte{}}
	a.mu.Unlock()
	a.m.streams.WithLabelValues(id.mode()).Inc()
}

func (a *acks) closed(id streamKey) {
	a.mu.Lock()
	if s := a.streams[id]; s != nil && s.lagging {
		a.m.laggingStreams.Dec()
	}
	delete(a.streams, id)
	a.recompute()
	a.mu.Unlock()
	a.m.streams.WithLabelValues(id.mode()).Dec()
}

func (a *acks) sent(id streamKey, typeURL, version, nonce string) {
	a.m.pushes.WithLabelValues(shortType(typeURL)).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.streams[id]; s != nil {
		s.pending[nonce] = push{typeURL: typeURL, version: version, at: a.clock.Now()}
	}
}

// received handles a request on stream id: the first admits the stream (callbacks are wrapped in the
// version gate, so a request reaches acks only from a node it accepted); one that names a nonce we
// sent is an ACK or NACK.
func (a *acks) received(id streamKey, node *corev3.Node, nonce string, nack *string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.streams[id]
	if s == nil {
		return
	}
	if node != nil && node.Id != "" {
		s.node = node.Id
		if len(s.node) > maxNodeID {
			s.node = s.node[:maxNodeID]
		}
	}
	if !s.admitted {
		s.admitted, s.since = true, a.clock.Now()
		a.recompute()
	}
	if nonce == "" {
		return
	}
	p, ok := s.pending[nonce]
	if !ok {
		return
	}
	// A newer response of a type supersedes older ones of that type (ADS multiplexes types).
	for n, q := range s.pending {
		if q.typeURL == p.typeURL {
			delete(s.pending, n)
		}
	}
	a.m.ackLatency.Observe(a.clock.Now().Sub(p.at).Seconds())
	typ := shortType(p.typeURL)
	if nack != nil {
		a.m.nacks.WithLabelValues(typ).Inc()
		// Log a NACK once per stream, type, version and detail: Envoy repeats the same NACK on
		// every retry, and a line per retry would bury the first.
		digest := sha256.Sum256([]byte(p.version + "\x00" + *nack))
		if prev, ok := s.nacked[p.typeURL]; !ok || prev != digest {
			s.nacked[p.typeURL] = digest
			detail := *nack
			if len(detail) > maxNackDetail {
				detail = detail[:maxNackDetail] + "...(truncated)"
			}
			a.log.Error("Envoy rejected configuration; it keeps its last accepted config",
				zap.String("node", s.node), zap.String("type", typ), zap.String("version", p.version), zap.String("detail", detail))
		}
		if s.refused != p.version {
			s.refused = p.version
			a.recompute()
		}
		return
	}
	delete(s.nacked, p.typeURL)
	a.m.acks.WithLabelValues(typ).Inc()
	if p.typeURL == resourcev3.ClusterType {
		if pub, ok := a.published[p.version]; ok {
			s.clusters, s.acked = pub.clusters, p.version
			a.recompute()
		}
	}
}

func shortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ClusterType:
		return "cluster"
	case resourcev3.ListenerType:
		return "listener"
	case resourcev3.RouteType:
		return "route"
	case resourcev3.EndpointType:
		return "endpoint"
	case resourcev3.SecretType:
		return "secret"
	}
	return "other"
}

// callbacks adapts acks to go-control-plane's server callbacks.
type callbacks struct{ a *acks }

func (c callbacks) OnStreamOpen(_ context.Context, id int64, _ string) error {
	c.a.open(streamKey{id: id})
	return nil
}
func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node) { c.a.closed(streamKey{id: id}) }
func (c callbacks) OnStreamRequest(id int64, r *discoveryv3.DiscoveryRequest) error {
	c.a.received(streamKey{id: id}, r.GetNode(), r.GetResponseNonce(), nackDetail(r.GetErrorDetail().GetMessage(), r.GetErrorDetail() != nil))
	return nil
}
func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
	c.a.sent(streamKey{id: id}, r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce())
}
func (c callbacks) OnDeltaStreamOpen(_ context.Context, id int64, _ string) error {
	c.a.open(streamKey{delta: true, id: id})
	return nil
}
func (c callbacks) OnDeltaStreamClosed(id int64, _ *corev3.Node) {
	c.a.closed(streamKey{delta: true, id: id})
}
func (c callbacks) OnStreamDeltaRequest(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
	c.a.received(streamKey{delta: true, id: id}, r.GetNode(), r.GetResponseNonce(), nackDetail(r.GetErrorDetail().GetMessage(), r.GetErrorDetail() != nil))
	return nil
}
func (c callbacks) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, r *discoveryv3.DeltaDiscoveryResponse) {
	c.a.sent(streamKey{delta: true, id: id}, r.GetTypeUrl(), r.GetSystemVersionInfo(), r.GetNonce())
}
func (c callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error           { return nil }
func (c callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}

func nackDetail(msg string, isNack bool) *string {
	if !isNack {
		return nil
	}
	msg = strings.TrimSpace(msg)
	return &msg
}
