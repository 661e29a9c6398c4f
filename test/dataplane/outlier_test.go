package dataplane

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// skewgateOutlier is the outlier_detection skewgate generated before it dropped outlier detection
// (xds/clusters.go says why): split mode, gateway failures enforced.
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

	// max_ejection_percent 50 of 3 hosts: ejectHost counts the host about to go, 100 x (0+1)/3 = 33
	// passes, 100 x (1+1)/3 = 67 does not: one ejection, not two.
	three := testCluster(t, testDP(t, 3), 3, func(c *clusterv3.Cluster) {
		c.OutlierDetection = skewgateOutlier()
		c.OutlierDetection.MaxEjectionPercent = wrapperspb.UInt32(50)
	})
	for _, h := range three.hosts {
		for range 3 {
			three.od.connectFailed(h)
		}
	}
	if n := ejectedCount(three); n != 1 {
		t.Errorf("max_ejection_percent 50 of 3 hosts: %d ejected, want 1", n)
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

func ejectedCount(c *cluster) int {
	n := 0
	for _, h := range c.hosts {
		if h.ejected.Load() {
			n++
		}
	}
	return n
}

// TestOutlierSplitModeGatewayFailures: with split_external_local_origin_errors an upstream's own
// 502/503/504 answers still go to putHttpResponseCode, so they eject whenever
// enforcing_consecutive_gateway_failure says so; with enforcement 0 the detection happens and its
// counter restarts, but nothing is ejected, however many there are.
func TestOutlierSplitModeGatewayFailures(t *testing.T) {
	enforced := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) { c.OutlierDetection = skewgateOutlier() })
	for range 5 {
		enforced.od.httpStatus(enforced.hosts[0], 503)
	}
	if !enforced.hosts[0].ejected.Load() {
		t.Error("split mode, enforcing_consecutive_gateway_failure 100: 5 answers 503 did not eject")
	}

	off := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) {
		c.OutlierDetection = skewgateOutlier()
		c.OutlierDetection.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(0)
	})
	h := off.hosts[0]
	for range 50 {
		off.od.httpStatus(h, 503)
		off.od.httpStatus(h, 504)
	}
	if h.ejected.Load() {
		t.Error("split mode, enforcing_consecutive_gateway_failure 0: gateway failures ejected")
	}
	if h.od.consecGateway >= 5 {
		t.Errorf("gateway count %d: a detection restarts the counter of its kind", h.od.consecGateway)
	}
	// Unset enforcing_consecutive_gateway_failure is Envoy's default 0; unset consecutive 5xx
	// enforcement is 100, so the same 5xx answers eject through consecutive_5xx.
	dflt := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) {
		c.OutlierDetection = &clusterv3.OutlierDetection{SplitExternalLocalOriginErrors: true, MaxEjectionPercent: wrapperspb.UInt32(100)}
	})
	for range 4 {
		dflt.od.httpStatus(dflt.hosts[0], 503)
	}
	if dflt.hosts[0].ejected.Load() {
		t.Error("ejected before consecutive_5xx (default 5)")
	}
	dflt.od.httpStatus(dflt.hosts[0], 503)
	if !dflt.hosts[0].ejected.Load() {
		t.Error("defaults: 5 answers 503 did not eject through consecutive_5xx (enforcing default 100)")
	}
}

// TestOutlierUnejectRestartsCounters: unejection restarts every consecutive counter, so a host
// let back in needs a whole new run of failures.
func TestOutlierUnejectRestartsCounters(t *testing.T) {
	c := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) { c.OutlierDetection = skewgateOutlier() })
	h := c.hosts[0]
	for range 4 {
		c.od.httpStatus(h, 503)
	}
	for range 3 {
		c.od.connectFailed(h)
	}
	if !h.ejected.Load() {
		t.Fatal("3 local-origin failures did not eject")
	}
	c.od.uneject(h)
	c.od.httpStatus(h, 503)
	if h.ejected.Load() {
		t.Error("one 503 after unejection ejected: the gateway count survived the ejection")
	}
}

// brokenBody ends after some bytes with an error, as a response the upstream reset mid-body.
type brokenBody struct{ err error }

func (b brokenBody) Read([]byte) (int, error) { return 0, b.err }
func (brokenBody) Close() error               { return nil }

// TestOutlierLateResetCounts: a body the upstream breaks off after the headers is a reset, which the
// router reports as LOCAL_ORIGIN_CONNECT_FAILED like one before them; a stream the downstream gave up
// on is not reported.
func TestOutlierLateResetCounts(t *testing.T) {
	c := testCluster(t, testDP(t, 3), 2, func(c *clusterv3.Cluster) { c.OutlierDetection = skewgateOutlier() })
	h := c.hosts[0]
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	for range 3 {
		b := &countedBody{ReadCloser: brokenBody{errors.New("stream error: stream ID 3; INTERNAL_ERROR; received from peer")}, h: h, od: c.od, req: req}
		io.ReadAll(b)
		io.ReadAll(b) // one report per stream
		h.active.Add(1)
		b.Close()
	}
	if !h.ejected.Load() {
		t.Errorf("3 responses reset mid-body: local-origin count %d, not ejected", h.od.consecLocal)
	}

	g := c.hosts[1]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := req.WithContext(ctx)
	for range 5 {
		io.ReadAll(&countedBody{ReadCloser: brokenBody{context.Canceled}, h: g, od: c.od, req: gone})
	}
	if g.od.consecLocal != 0 || g.ejected.Load() {
		t.Errorf("bodies the downstream gave up on counted: local-origin count %d", g.od.consecLocal)
	}
}
