package xds

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/skewgate/skewgate/internal/wire"
)

// TestSharedValidatorIsValidateAll: for every cluster of a translation, valid or made invalid in a
// part of its own, in a part it shares with others, or by a value it shares in another field, the
// shared validator returns exactly what ValidateAll returns.
func TestSharedValidatorIsValidateAll(t *testing.T) {
	anon := wire.AnonCluster(wire.AllCluster)
	cases := []struct {
		name   string
		mutate func(byName map[string]*clusterv3.Cluster)
		fail   int // clusters that must fail
	}{
		{name: "valid"},
		{name: "own field", fail: 1, mutate: func(c map[string]*clusterv3.Cluster) {
			c[wire.UpstreamCluster("apiserver-0007")].LoadAssignment.ClusterName = ""
		}},
		{name: "shared health check", fail: 12, mutate: func(c map[string]*clusterv3.Cluster) {
			// One anonymous twin per cluster: all, 10 upstreams, 1 set.
			c[anon].HealthChecks[0].HealthyThreshold = nil
		}},
		{name: "shared endpoints", fail: 9, mutate: func(c map[string]*clusterv3.Cluster) {
			// apiserver-3 is in the all-cluster, its own and a set's, each with twins.
			ep := c[wire.UpstreamCluster("apiserver-0003")].LoadAssignment.Endpoints[0].LbEndpoints[0]
			ep.GetEndpoint().GetAddress().GetSocketAddress().Address = ""
		}},
		{name: "one twin's own endpoints", fail: 1, mutate: func(c map[string]*clusterv3.Cluster) {
			// The twins share their endpoints; this one gets a list of its own, with a priority
			// over 128.
			la := c[wire.HTTP1Cluster(wire.AllCluster)].LoadAssignment
			la.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: la.Endpoints[0].LbEndpoints, Priority: 200}}
		}},
		{name: "one cluster's own copy of a shared part", fail: 1, mutate: func(c map[string]*clusterv3.Cluster) {
			c[anon].ConnectTimeout = &durationpb.Duration{Seconds: -1}
		}},
		{name: "a value that passed in one field, in another", fail: 1, mutate: func(c map[string]*clusterv3.Cluster) {
			// connect_timeout > 0 holds for 500us; dns_refresh_rate > 1ms does not.
			d := durationpb.New(500 * time.Microsecond)
			c[wire.AllCluster].ConnectTimeout = d
			c[wire.UpstreamCluster("apiserver-0000")].DnsRefreshRate = d
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Translate(syntheticTopology(10, 2), testOptions())
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*clusterv3.Cluster{}
			for _, c := range rs.Clusters {
				byName[c.Name] = c
			}
			if tc.mutate != nil {
				tc.mutate(byName)
			}
			v := newSharedValidator[*clusterv3.Cluster]()
			failed := 0
			for _, c := range rs.Clusters {
				want, got := c.ValidateAll(), v.validate(c)
				if (want == nil) != (got == nil) || want != nil && want.Error() != got.Error() {
					t.Errorf("cluster %s: ValidateAll %v, shared validator %v", c.Name, want, got)
				}
				if want != nil {
					failed++
				}
			}
			if failed != tc.fail {
				t.Errorf("%d clusters invalid, want %d", failed, tc.fail)
			}
		})
	}
}
