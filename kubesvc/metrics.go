package kubesvc

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Objects written (label values of skewgate_kubesvc_writes_total).
const (
	objEndpoints     = "endpoints"
	objEndpointSlice = "endpointslice"
)

// Write results (label values of skewgate_kubesvc_writes_total).
const (
	writeUpdated  = "updated"
	writeConflict = "conflict" // someone wrote it first: recomputed at once
	writeMissing  = "missing"  // the object does not exist; skewgate never creates it
	writeError    = "error"
)

// Heartbeat results (label values of skewgate_kubesvc_heartbeats_total).
const (
	beatRenewed     = "renewed"
	beatNotReady    = "not_ready"    // discovery has no ready apiserver: not renewed
	beatProbeFailed = "probe_failed" // the local front did not answer: not renewed
	beatError       = "error"        // the Lease write failed
)

type metrics struct {
	liveMembers prometheus.Gauge
	fallback    prometheus.Gauge
	writes      *prometheus.CounterVec
	rivals      prometheus.Counter
	badLeases   *prometheus.CounterVec
	heartbeats  *prometheus.CounterVec
}

// NewMetrics registers the mode's metrics on reg. serve registers them whether or not the mode is
// on, so one registry always describes the same metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &metrics{
		liveMembers: f.NewGauge(prometheus.GaugeOpts{Name: "skewgate_kubesvc_live_members",
			Help: "Member Leases (fronts) this process sees live, valid ones only."}),
		fallback: f.NewGauge(prometheus.GaugeOpts{Name: "skewgate_kubesvc_fallback",
			Help: "1 while the kubernetes Service's endpoints are the apiservers' own (no front live)."}),
		writes: f.NewCounterVec(prometheus.CounterOpts{Name: "skewgate_kubesvc_writes_total",
			Help: "Writes of the kubernetes Endpoints and EndpointSlice, by object and result."}, []string{"object", "result"}),
		rivals: f.NewCounter(prometheus.CounterOpts{Name: "skewgate_kubesvc_rival_writes_total",
			Help: "Changes of the kubernetes EndpointSlice to other endpoints by another writer than skewgate (an apiserver's reconciler)."}),
		badLeases: f.NewCounterVec(prometheus.CounterOpts{Name: "skewgate_kubesvc_bad_member_leases_total",
			Help: "Member Leases ignored, counted once per Lease and content, by reason."}, []string{"reason"}),
		heartbeats: f.NewCounterVec(prometheus.CounterOpts{Name: "skewgate_kubesvc_heartbeats_total",
			Help: "Heartbeats of this member's Lease, by result."}, []string{"result"}),
	}
	for _, r := range badReasons {
		m.badLeases.WithLabelValues(r)
	}
	return &Metrics{m}
}

// Metrics are the mode's metrics, shared by the Controller serve starts.
type Metrics struct{ m *metrics }
