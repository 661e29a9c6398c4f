package certs

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reloads  *prometheus.CounterVec
	failures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_certificate_reloads_total",
			Help: "New content loaded from a rotated certificate file, by certificate (grpc_serving, grpc_client_ca).",
		}, []string{"certificate"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_certificate_reload_failures_total",
			Help: "Failed re-reads of a certificate file, by certificate (grpc_serving, grpc_client_ca); the last good content is kept. Counted at every attempt (every 10s) while the file stays broken.",
		}, []string{"certificate"}),
	}
	for _, name := range []string{Serving, ClientCA} {
		m.reloads.WithLabelValues(name)
		m.failures.WithLabelValues(name)
	}
	if reg != nil {
		reg.MustRegister(m.reloads, m.failures)
	}
	return m
}
