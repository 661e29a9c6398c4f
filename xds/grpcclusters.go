package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// extProcCluster is the gRPC cluster of the ext_proc service; its mTLS pair and CA arrive over SDS.
func (tb *translator) extProcCluster() (*clusterv3.Cluster, error) {
	var creds *envoyconf.GRPCCreds
	if tb.o.ExtProcCAFile != "" {
		creds = &envoyconf.GRPCCreds{Cert: sdsRef(SecretExtProcCert), CA: sdsRef(SecretExtProcCA)}
	}
	c, err := envoyconf.GRPCCluster(wire.ExtProcCluster, tb.o.ExtProcAddress, tb.o.ExtProcSNI, creds)
	if err != nil {
		return nil, err
	}
	// One stream per request, and with Envoy < 1.37 one per open watch.
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     wrapperspb.UInt32(1024),
		MaxPendingRequests: wrapperspb.UInt32(10000),
		MaxRequests:        wrapperspb.UInt32(1000000),
	}}}
	return c, nil
}
