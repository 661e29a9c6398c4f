package extproc

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/skewgate/skewgate/internal/wire"
)

// Decision outcomes (label values of skewgate_extproc_decisions_total).
const (
	OutcomeDefault     = "default"     // no routing header: every upstream serves it, or none does
	OutcomeRouted      = "routed"      // routed to a capability-set or upstream cluster
	OutcomeUnavailable = "unavailable" // 503: capable upstreams exist, none is ready
	OutcomeDiscovery   = "discovery"   // discovery the front serves merged once an apiserver authorizes the request
	OutcomeOpenAPI     = "openapi"     // an OpenAPI v3 index or document the front serves once an apiserver authorizes the request
	OutcomePassthrough = "passthrough" // non-resource request, or discovery an apiserver answers itself (profile=nopeer)
	OutcomeUnsynced    = "unsynced"    // no Topology yet: default route
	OutcomeInvalid     = "invalid"     // malformed request: 400
	// OutcomeIdentityRefused: 503, the Lua identity filter could not derive the client certificate's
	// identity exactly (skewgate_identity_refused_total has the reason).
	OutcomeIdentityRefused = "identity_refused"
)

type metrics struct {
	decisions *prometheus.CounterVec
	latency   prometheus.Histogram
	streams   prometheus.Gauge

	discoveryResponses *prometheus.CounterVec
	openAPIResponses   *prometheus.CounterVec
	identityRefused    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg) // registers nothing when reg is nil
	m := &metrics{
		decisions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_extproc_decisions_total",
			Help: "Routing decisions by outcome (default, routed, unavailable, discovery, openapi, passthrough, unsynced, invalid, identity_refused).",
		}, []string{"outcome"}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "skewgate_extproc_decision_duration_seconds",
			Help:    "Time from receiving request headers to having the response ready, inside the service.",
			Buckets: prometheus.ExponentialBuckets(250e-9, 4, 10),
		}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_extproc_streams_in_flight",
			Help: "Open ext_proc streams (one per HTTP request; Envoy < 1.37 keeps one open per WATCH).",
		}),
		discoveryResponses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_extproc_discovery_responses_total",
			Help: "Discovery requests in the response phase by outcome (served: the apiserver authorized it and the merged answer replaced its own; passed: its refusal or error passed through, or it asked for the apiserver's own view; busy: authorized, but no serving slot came free in time, 503 with Retry-After; unexpected: response headers without a pending answer).",
		}, []string{"outcome"}),
		openAPIResponses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_extproc_openapi_responses_total",
			Help: "OpenAPI v3 requests the front answers, in the response phase, by kind (index, document) and outcome (served, redirected, not_modified: the apiserver authorized it and the front's answer replaced its own; passed: its refusal or error passed through, or nothing acceptable; busy: authorized, but no serving slot came free in time, 503 with Retry-After).",
		}, []string{"kind", "outcome"}),
		identityRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_identity_refused_total",
			Help: "Requests with a verified client certificate the front answered 503 because its Lua identity filter cannot derive exactly the identity the apiserver would (reason: uid, subject, nouser, unverified, other). Counted only while ext_proc answers; otherwise the Lua filter after ext_proc answers them.",
		}, []string{"reason"}),
	}
	for _, k := range []string{OpenAPIIndex, OpenAPIDocument} {
		for _, o := range []string{OpenAPIServed, OpenAPIRedirected, OpenAPINotModified, OpenAPIPassed, OpenAPIBusy} {
			m.openAPIResponses.WithLabelValues(k, o)
		}
	}
	for _, o := range []string{DiscoveryServed, DiscoveryPassed, DiscoveryUnexpected, DiscoveryBusy} {
		m.discoveryResponses.WithLabelValues(o)
	}
	for _, r := range append(slices.Clone(wire.IdentityRefusalReasons), wire.IdentityRefusalOther) {
		m.identityRefused.WithLabelValues(r)
	}
	for _, o := range []string{OutcomeDefault, OutcomeRouted, OutcomeUnavailable, OutcomeDiscovery, OutcomeOpenAPI, OutcomePassthrough, OutcomeUnsynced, OutcomeInvalid, OutcomeIdentityRefused} {
		m.decisions.WithLabelValues(o)
	}
	return m
}
