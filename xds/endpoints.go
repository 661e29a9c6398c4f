package xds

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/skewgate/skewgate/xds/envoyconf"
)

// upstreamEndpoint is the Envoy endpoint of one upstream: parsed from its address when a cluster
// first names the upstream, then shared by every cluster it is a member of (the upstream's own, its
// capability sets', the all-cluster, and their twins).
type upstreamEndpoint struct {
	addr string
	ep   *endpointv3.LbEndpoint // nil until parsed
	dns  bool                   // the address names a host, not an IP
}

// members is the endpoint list of one apiserver cluster, shared by its twins.
type members struct {
	localities []*endpointv3.LocalityLbEndpoints // nil without members
	typ        *clusterv3.Cluster_Type
}

// members resolves the upstream names of cluster into their endpoints. IP literals make a STATIC
// cluster; any hostname makes the cluster STRICT_DNS, which resolves every endpoint.
func (tb *translator) members(cluster string, names []string) (members, error) {
	ups := make([]*upstreamEndpoint, len(names))
	for i, n := range names {
		if ups[i] = tb.upstreams[n]; ups[i] == nil {
			return members{}, fmt.Errorf("cluster %s: member %q is not an upstream", cluster, n)
		}
	}
	typ := clusterv3.Cluster_STATIC
	eps := make([]*endpointv3.LbEndpoint, len(ups))
	for i, u := range ups {
		if u.ep == nil {
			var err error
			if u.ep, u.dns, err = envoyconf.Endpoint(u.addr); err != nil {
				return members{}, fmt.Errorf("cluster %s: address %q: %v", cluster, u.addr, err)
			}
		}
		if u.dns {
			typ = clusterv3.Cluster_STRICT_DNS
		}
		eps[i] = u.ep
	}
	m := members{typ: &clusterv3.Cluster_Type{Type: typ}}
	if len(eps) > 0 {
		m.localities = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}
	}
	return m, nil
}

// loadAssignment is the load assignment of members for the cluster named name.
func (m members) loadAssignment(name string) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: m.localities}
}
