package discovery

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	upstreams       *prometheus.GaugeVec
	fetchErrors     *prometheus.CounterVec
	rejectedLeases  *prometheus.CounterVec
	ignoredLeases   *prometheus.GaugeVec
	rebuildDuration prometheus.Histogram
	leaseToTopology prometheus.Histogram
	generation      prometheus.Gauge
	published       prometheus.Counter
}

// Upstream states (label values of skewgate_discovery_upstreams).
const (
	stateReady    = "ready"
	stateNotReady = "not_ready"
	stateStale    = "stale"
)

// ignoredReasons are the label values of skewgate_discovery_ignored_leases.
var ignoredReasons = []string{IgnoredNoAddress, IgnoredContested, IgnoredMaxUpstreams, RejectMalformed, RejectNotAllowed}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		upstreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skewgate_discovery_upstreams",
			Help: "Upstream apiservers in the current Topology by state (ready, not_ready, stale: capabilities from a failed fetch).",
		}, []string{"state"}),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_fetch_errors_total",
			Help: "Failed fetches of /api, /apis, /version or /readyz from upstreams by type (connect, status, too_large, content_type, decode, invalid).",
		}, []string{"type"}),
		rejectedLeases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_rejected_leases_total",
			Help: "Identity Lease addresses refused by the address policy, by reason (malformed, not_allowed). Counted once per Lease and address.",
		}, []string{"reason"}),
		ignoredLeases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skewgate_discovery_ignored_leases",
			Help: "Live identity Leases that are no upstream, by reason (no_address: add a --static-upstream for the hostname; contested_hostname; max_upstreams; malformed, not_allowed: refused by the address policy).",
		}, []string{"reason"}),
		rebuildDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_discovery_rebuild_duration_seconds",
			Help:    "Time to rebuild the Topology from listers and fetched documents.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
		leaseToTopology: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_discovery_lease_event_to_topology_seconds",
			Help:    "Time from an identity Lease event to the publication of the Topology that reflects it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_discovery_topology_generation",
			Help: "Sequence number of the current Topology within this process (the version string also carries the process start).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_discovery_topologies_published_total",
			Help: "Topologies published (only content changes publish).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.upstreams, m.fetchErrors, m.rejectedLeases, m.ignoredLeases, m.rebuildDuration, m.leaseToTopology, m.generation, m.published)
	}
	for _, r := range ignoredReasons {
		m.ignoredLeases.WithLabelValues(r)
	}
	for _, s := range []string{stateReady, stateNotReady, stateStale} {
		m.upstreams.WithLabelValues(s)
	}
	return m
}
