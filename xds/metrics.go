package xds

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Label values.
const (
	modeSotW  = "sotw"
	modeDelta = "delta"

	publishOK        = "published"
	publishUnchanged = "unchanged"
	publishFailed    = "failed"
)

type metrics struct {
	streams       *prometheus.GaugeVec
	pushes        *prometheus.CounterVec
	acks          *prometheus.CounterVec
	nacks         *prometheus.CounterVec
	ackLatency    prometheus.Histogram
	publishes     *prometheus.CounterVec
	translate     prometheus.Histogram
	clusters      prometheus.Gauge
	retained      prometheus.Gauge
	readyClusters prometheus.Gauge
	refused       *prometheus.CounterVec
	unexpressed   prometheus.Gauge
	// The ACK gate (acktopology.go).
	gatedStreams   prometheus.Gauge
	laggingStreams prometheus.Gauge
	ackTimeouts    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg) // registers nothing when reg is nil
	m := &metrics{
		streams: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skewgate_xds_streams",
			Help: "Open xDS streams by protocol (sotw, delta).",
		}, []string{"mode"}),
		pushes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_xds_pushes_total",
			Help: "xDS responses sent, by resource type.",
		}, []string{"type"}),
		acks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_xds_acks_total",
			Help: "xDS responses acknowledged by Envoy, by resource type.",
		}, []string{"type"}),
		nacks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_xds_nacks_total",
			Help: "xDS responses rejected by Envoy, by resource type. The error detail is logged once per version.",
		}, []string{"type"}),
		ackLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_xds_ack_duration_seconds",
			Help:    "Time from sending an xDS response to its ACK or NACK.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		publishes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_xds_publishes_total",
			Help: "Snapshot publications by result: published, unchanged (identical resources, nothing sent), failed (translation or validation failed; Envoy keeps the last good snapshot).",
		}, []string{"result"}),
		translate: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_xds_translate_duration_seconds",
			Help:    "Time to translate a Topology into Envoy resources and build the snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		clusters: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_clusters",
			Help: "Clusters in the published snapshot, including retained ones.",
		}),
		retained: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_retained_clusters",
			Help: "Clusters no longer in the Topology, kept for the grace period so in-flight routing never names a missing cluster.",
		}),
		readyClusters: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_acked_clusters",
			Help: "Clusters every connected Envoy has acknowledged: the ones ext_proc may name.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_xds_refused_nodes_total",
			Help: "xDS streams refused before any resource was sent, by reason: too_old (an Envoy below the supported releases or the patch that fixes CVE-2026-73548), unknown_version (no or a non-1.x user_agent_build_version), not_envoy (user_agent_name is not envoy). Logged once per node and version.",
		}, []string{"reason"}),
		unexpressed: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_unexpressed_keys",
			Help: "Rows of the decision table that the published snapshot's route table cannot carry, skewed resource keys and OpenAPI v3 documents: ext_proc decides them, and while it fails open they take the default route (OpenAPI documents: the schema routes). Each is logged and listed by skewgate topology.",
		}),
		gatedStreams: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_gated_streams",
			Help: "xDS streams ext_proc waits for (their clusters and Topology): past the version check and acknowledging in time.",
		}),
		laggingStreams: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_xds_lagging_streams",
			Help: "Open xDS streams past the version check that ext_proc no longer waits for: they did not acknowledge a snapshot within 30s of its publication, and have not caught up since.",
		}),
		ackTimeouts: f.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_xds_ack_timeouts_total",
			Help: "Times an xDS stream stopped counting for ext_proc because it did not acknowledge a snapshot within 30s of its publication; each is logged.",
		}),
	}
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r)
	}
	return m
}
