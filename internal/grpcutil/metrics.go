package grpcutil

import "github.com/prometheus/client_golang/prometheus"

// RefusedMetric counts refused connections by server and reason; register it once.
func RefusedMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "skewgate_grpc_refused_connections_total",
		Help: "Connections to the xDS and ext_proc gRPC servers refused before gRPC, by server and reason: peer_uid (a unix socket peer whose uid is not allowed), no_peer_credentials (its uid could not be read), plaintext_tcp (plaintext over TCP without " + PlaintextLoopbackFlag + ", or from off the host). Logged once per server, reason and uid.",
	}, []string{"server", "reason"})
}
