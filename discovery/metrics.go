package discovery

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	upstreams       *prometheus.GaugeVec
	fetchErrors     *prometheus.CounterVec
	rejectedLeases  *prometheus.CounterVec
	ignoredLeases   *prometheus.GaugeVec
	rebuildDuration prometheus.Histogram
	leaseToTopology prometheus.Histogram
	generation      prometheus.Gauge
	syncs           *prometheus.CounterVec

	openapiFetches        *prometheus.CounterVec
	openapiBudgetExceeded prometheus.Counter
	openapiHeldBytes      prometheus.Gauge
}

// OpenAPI fetch results (label values of skewgate_discovery_openapi_fetches_total besides the fetch
// error types): what is index or document.
const (
	openapiIndex     = "index"
	openapiDocument  = "document"
	resultOK         = "ok"
	resultUnchanged  = "unchanged"   // an index with the bytes of the last one
	resultNotFound   = "not_found"   // an index answered 404: OpenAPI v3 off on that upstream
	resultShared     = "shared"      // a document another upstream already holds under the same hash
	resultOverBudget = "over_budget" // not fetched or not kept: MaxOpenAPIBytes
)

var openapiResults = []string{resultOK, resultUnchanged, resultNotFound, resultShared, resultOverBudget,
	ErrConnect, ErrStatus, ErrTooLarge, ErrDecode, ErrInvalid, ErrMoved, ErrIntegrity}

// Sync results (label values of skewgate_discovery_syncs_total).
const (
	syncWaiting   = "waiting"   // no Topology yet: held for the upstreams' first fetches
	syncUnchanged = "unchanged" // no input of the Topology changed: nothing rebuilt
	syncRebuilt   = "rebuilt"   // an input changed, the rebuilt Topology did not: nothing published
	syncPublished = "published" // a Topology with new content published (only content changes publish)
)

// Upstream states (label values of skewgate_discovery_upstreams).
const (
	stateReady    = "ready"
	stateNotReady = "not_ready"
	stateStale    = "stale"
)

// ignoredReasons are the label values of skewgate_discovery_ignored_leases.
var ignoredReasons = []string{IgnoredNoAddress, IgnoredContested, IgnoredMaxUpstreams, RejectMalformed, RejectNotAllowed}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg) // registers nothing when reg is nil
	m := &metrics{
		upstreams: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skewgate_discovery_upstreams",
			Help: "Upstream apiservers in the current Topology by state, each in exactly one (stale: capabilities kept from before a failed fetch; else ready or not_ready).",
		}, []string{"state"}),
		fetchErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_fetch_errors_total",
			Help: "Failed fetches of /api, /apis, /version, /readyz, /openapi/v3 or OpenAPI v3 documents from upstreams by type (connect, status, too_large, content_type, decode, invalid, moved, integrity).",
		}, []string{"type"}),
		rejectedLeases: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_rejected_leases_total",
			Help: "Identity Lease addresses refused by the address policy, by reason (malformed, not_allowed). Counted once per Lease and address.",
		}, []string{"reason"}),
		ignoredLeases: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skewgate_discovery_ignored_leases",
			Help: "Live identity Leases that are no upstream, by reason (no_address: add a --static-upstream for the hostname; contested_hostname; max_upstreams; malformed, not_allowed: refused by the address policy).",
		}, []string{"reason"}),
		rebuildDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_discovery_rebuild_duration_seconds",
			Help:    "Time to rebuild the Topology from listers and fetched documents.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
		leaseToTopology: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_discovery_lease_event_to_topology_seconds",
			Help:    "Time from an identity Lease event to the publication of the Topology that reflects it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		generation: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_discovery_topology_generation",
			Help: "Sequence number of the current Topology within this process (the version string also carries the process start).",
		}),
		syncs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_syncs_total",
			Help: "Syncs of the Topology with the Leases and the upstreams' states, by result: waiting (no Topology yet: held for the upstreams' first fetches), unchanged (no input changed: nothing rebuilt), rebuilt (an input changed, the Topology did not: nothing published), published (a Topology with new content: only content changes publish).",
		}, []string{"result"}),
		openapiFetches: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_discovery_openapi_fetches_total",
			Help: "OpenAPI v3 fetches from upstreams by what (index, document) and result (ok; unchanged: same index bytes; not_found: OpenAPI v3 off; shared: a document held for another upstream under the same hash, not fetched; over_budget; or a fetch error type).",
		}, []string{"what", "result"}),
		openapiBudgetExceeded: f.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_discovery_openapi_budget_exceeded_total",
			Help: "OpenAPI v3 documents not fetched or not kept because the documents held would exceed MaxOpenAPIBytes; the front routes their keys to one upstream instead of merging.",
		}),
		openapiHeldBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_discovery_openapi_held_bytes",
			Help: "Bytes of the OpenAPI v3 documents held for merging, all upstreams together (bounded by MaxOpenAPIBytes).",
		}),
	}
	for _, what := range []string{openapiIndex, openapiDocument} {
		for _, r := range openapiResults {
			m.openapiFetches.WithLabelValues(what, r)
		}
	}
	for _, r := range ignoredReasons {
		m.ignoredLeases.WithLabelValues(r)
	}
	for _, r := range []string{syncWaiting, syncUnchanged, syncRebuilt, syncPublished} {
		m.syncs.WithLabelValues(r)
	}
	for _, s := range []string{stateReady, stateNotReady, stateStale} {
		m.upstreams.WithLabelValues(s)
	}
	return m
}

// setUpstreams sets skewgate_discovery_upstreams: every upstream in exactly one state, so the states
// add up to the upstreams. A stale upstream (capabilities from before a failed fetch) counts as stale
// whatever its readiness.
func (m *metrics) setUpstreams(us []Upstream) {
	counts := map[string]float64{stateReady: 0, stateNotReady: 0, stateStale: 0}
	for _, u := range us {
		counts[stateOf(u)]++
	}
	for s, n := range counts {
		m.upstreams.WithLabelValues(s).Set(n)
	}
}

func stateOf(u Upstream) string {
	switch {
	case u.Stale:
		return stateStale
	case u.Ready:
		return stateReady
	}
	return stateNotReady
}
