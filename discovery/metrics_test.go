package discovery

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every upstream is in exactly one state of skewgate_discovery_upstreams, so the states add up to the
// upstreams: a stale upstream was counted twice (stale and ready or not_ready) before.
func TestUpstreamStatesPartitionUpstreams(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.setUpstreams([]Upstream{
		{Name: "a", Ready: true},
		{Name: "b", Ready: true, Stale: true},
		{Name: "c", Stale: true},
		{Name: "d"},
		{Name: "e", Ready: true},
	})
	want := map[string]float64{stateReady: 2, stateNotReady: 1, stateStale: 2}
	for s, n := range want {
		if got := testutil.ToFloat64(m.upstreams.WithLabelValues(s)); got != n {
			t.Errorf("skewgate_discovery_upstreams{state=%q} = %v, want %v", s, got, n)
		}
	}
	// Emptied: every state drops to 0 rather than keeping the last value.
	m.setUpstreams(nil)
	for s := range want {
		if got := testutil.ToFloat64(m.upstreams.WithLabelValues(s)); got != 0 {
			t.Errorf("after no upstreams, state %q = %v, want 0", s, got)
		}
	}
}
