package dataplane

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// skewgateOutlier is the outlier_detection skewgate generates.
func skewgateOutlier() *clusterv3.OutlierDetection {
	return &clusterv3.OutlierDetection{
		BaseEjectionTime: durationpb.New(5e9), Interval: durationpb.New(5e9),
		ConsecutiveGatewayFailure: wrapperspb.UInt32(5), ConsecutiveLocalOriginFailure: wrapperspb.UInt32(3),
		EnforcingConsecutive_5Xx: wrapperspb.UInt32(0), EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
		EnforcingConsecutiveLocalOriginFailure: wrapperspb.UInt32(100), EnforcingSuccessRate: wrapperspb.UInt32(0),
		MaxEjectionPercent: wrapperspb.UInt32(100), SplitExternalLocalOriginErrors: true,
	}
}

// TestOutlierDetection: consecutive local-origin failures (connect failures, resets) and gateway
// failures eject as configured; a response resets the local-origin count; consecutive 5xx with
// enforcing 0 do not eject; max_ejection_percent caps ejections; a passing active check unejects.
func TestOutlierDetection(t *testing.T) {
	c := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) { c.OutlierDetection = skewgateOutlier() })
	a, b := c.hosts[0], c.hosts[1]
	c.od.connectFailed(a)
	c.od.connectFailed(a)
	c.od.connected(a)
	c.od.connectFailed(a)
	c.od.connectFailed(a)
	if a.ejected.Load() {
		t.Fatal("ejected although a response broke the run of local-origin failures")
	}
	c.od.connectFailed(a)
	if !a.ejected.Load() {
		t.Fatal("not ejected after consecutive_local_origin_failure (3) connect failures")
	}
	for range 4 {
		c.od.httpStatus(b, 503)
	}
	c.od.httpStatus(b, 500) // a 5xx that is no gateway failure breaks the run
	for range 4 {
		c.od.httpStatus(b, 504)
	}
	if b.ejected.Load() {
		t.Fatal("ejected before 5 consecutive gateway failures")
	}
	c.od.httpStatus(b, 502)
	if !b.ejected.Load() {
		t.Fatal("not ejected after 5 consecutive gateway failures (enforcing 100)")
	}
	// A passing active check unejects (successful_active_health_check_uneject_host default).
	c.hc = hcCluster(t, 2, 1).hc
	a.healthy.Store(true)
	c.record(a, hcPass)
	if a.ejected.Load() {
		t.Error("a passing active health check did not uneject")
	}

	// consecutive 5xx, enforcing 0: never ejected.
	d := testCluster(t, testDP(t, 3), 1, func(c *clusterv3.Cluster) { c.OutlierDetection = skewgateOutlier() })
	for range 20 {
		d.od.httpStatus(d.hosts[0], 500)
	}
	if d.hosts[0].ejected.Load() {
		t.Error("500s ejected with enforcing_consecutive_5xx 0")
	}

	// max_ejection_percent 50 of 2 hosts: one ejection at most.
	e := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) {
		c.OutlierDetection = skewgateOutlier()
		c.OutlierDetection.MaxEjectionPercent = wrapperspb.UInt32(50)
	})
	for _, h := range e.hosts {
		for range 3 {
			e.od.connectFailed(h)
		}
	}
	if e.hosts[0].ejected.Load() == e.hosts[1].ejected.Load() {
		t.Error("max_ejection_percent 50 of 2 hosts: want exactly one ejected")
	}
}
