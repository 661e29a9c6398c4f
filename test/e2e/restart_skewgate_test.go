package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// knownRestartBugs marked two product bugs this phase found, both fixed: a restarted skewgate
// decided ext_proc requests before its first Topology and named skewgate-all, overriding the skew
// routes of the route table the data plane kept (skewed requests reached old: 404); and right after
// its first Topology its ACK gate held back clusters the data plane already had (503 "being set
// up"). ext_proc now decides only with a Topology every connected Envoy has acknowledged and names
// no cluster before, so every request of this phase must succeed. Set it to true only to count a
// regression of either instead of failing on it.
const knownRestartBugs = false

func restartSkewgate(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *front.Node) map[string]any {
	tr := startTraffic(t, tb, n.URL, 4, restartTrafficOps)
	time.Sleep(warm) // traffic through ext_proc first
	down := time.Now()
	stopErr := n.StopSkewgate()
	stopped := time.Now()
	// The restarted skewgate's informers hang until released, so it has no Topology yet when the data
	// plane reconnects to it: it must send nothing the data plane would trade its config for.
	n.Informers.Set(front.Hang)
	time.Sleep(away)
	started := time.Now() // its ext_proc socket listens before StartSkewgate returns
	if err := n.StartSkewgate(); err != nil {
		tr.halt()
		t.Fatal(err)
	}
	reg := n.Skewgate().Registry
	// Polling metrics (the data plane reconnects on its own backoff): an xDS stream, and ext_proc
	// decisions, on the new skewgate.
	waitMetric(ctx, t, reg, "skewgate_xds_streams", "")
	waitMetric(ctx, t, reg, "skewgate_extproc_decisions_total", "")
	reconnected := time.Now()
	time.Sleep(away) // clients use the data plane while it is connected to a skewgate with no Topology
	early := n.Skewgate().Ready()
	unsynced := metricSum(t, reg, "skewgate_extproc_decisions_total", "unsynced")
	released := time.Now()
	n.Informers.Set(front.Forward)
	var topology time.Time
	for topology.IsZero() && ctx.Err() == nil {
		if n.Skewgate().Ready() {
			topology = time.Now()
			break
		}
		time.Sleep(10 * time.Millisecond) // polling skewgate's readiness (no event to wait on)
	}
	waitMetric(ctx, t, reg, "skewgate_xds_acks_total", "")
	acked := time.Now()
	time.Sleep(2 * warm) // and after, with ext_proc and xDS back
	calls := tr.halt()
	decisions, acks := metricSum(t, reg, "skewgate_extproc_decisions_total", ""), metricSum(t, reg, "skewgate_xds_acks_total", "")
	if stopErr != nil {
		t.Errorf("skewgate ended with %v", stopErr)
	}
	if topology.IsZero() {
		t.Fatal("the restarted skewgate never published a Topology")
	}
	all, byOp := count(calls, func(call) bool { return true })
	during, _ := count(calls, func(c call) bool { return c.start.After(down) && c.start.Before(topology) })
	connected, _ := count(calls, func(c call) bool { return c.start.After(reconnected) && c.start.Before(topology) })
	t.Logf("skewgate of node %s restarted under traffic (stop %v; data plane back on both sockets %v after the start; informers held %v; start to first Topology %v, to first ACK %v): %d requests, by outcome%s; while skewgate had no Topology%s, of them after the data plane was back%s; %v ext_proc decisions unsynced",
		n.Name, stopped.Sub(down).Round(time.Millisecond), reconnected.Sub(started).Round(time.Millisecond), released.Sub(started).Round(time.Millisecond),
		topology.Sub(started).Round(time.Millisecond), acked.Sub(started).Round(time.Millisecond), len(calls), all, during, connected, unsynced)
	logFailures(t, "skewgate restart", calls)

	var bug1, bug2 int
	bad := violations{phase: "skewgate restart", want: "200"}
	for _, c := range calls {
		if c.code == http.StatusOK {
			continue
		}
		known := knownRestartBugs && !c.op.shared && c.start.After(started) && c.start.Before(acked)
		switch {
		case known && c.code == http.StatusNotFound:
			bug1++
		case known && c.code == http.StatusServiceUnavailable && c.err != nil && strings.Contains(c.err.Error(), "is being set up"):
			bug2++
		default:
			bad.add(c)
		}
	}
	bad.report(t)
	if knownRestartBugs {
		t.Logf("KNOWN PRODUCT BUG (knownRestartBugs): %d wrong 404 on the skewed API from unsynced ext_proc decisions, %d 503 from the ACK gate of the restarted skewgate", bug1, bug2)
		if bug1 == 0 {
			t.Error("knownRestartBugs: no wrong 404 while ext_proc decided unsynced: if extproc no longer names skewgate-all without a Topology, set knownRestartBugs to false")
		}
	}
	if early {
		t.Error("skewgate published a Topology while its informers were held: the phase proves nothing")
	}
	if unsynced == 0 || connected["200"] == 0 {
		t.Errorf("%v unsynced ext_proc decisions, %v requests while the data plane was back on a skewgate with no Topology: the phase proves nothing", unsynced, connected)
	}
	// The data plane came back to the restarted skewgate: it ACKed its snapshot, and ext_proc decides.
	if acks == 0 || decisions == 0 {
		t.Errorf("the restarted skewgate has %v xDS ACKs and %v ext_proc decisions, want both > 0", acks, decisions)
	}
	return map[string]any{"requests": len(calls), "by_outcome": all, "by_op": byOp,
		"while_no_topology": during, "while_no_topology_data_plane_back": connected,
		"known_bug_unsynced_wrong_404": bug1, "known_bug_ack_gate_503": bug2, "unsynced_extproc_decisions": unsynced,
		"restarted_skewgate_xds_acks": acks, "restarted_skewgate_extproc_decisions": decisions,
		"stop_ms": ms(stopped.Sub(down)), "skewgate_away_ms": ms(started.Sub(down)),
		"start_to_data_plane_back_ms": ms(reconnected.Sub(started)), "informers_held_ms": ms(released.Sub(started)),
		"known_restart_bugs":         knownRestartBugs,
		"start_to_first_topology_ms": ms(topology.Sub(started)), "start_to_first_ack_ms": ms(acked.Sub(started))}
}

// waitMetric polls until metricSum(reg, name, label) > 0.
func waitMetric(ctx context.Context, t *testing.T, reg prometheus.Gatherer, name, label string) {
	t.Helper()
	for metricSum(t, reg, name, label) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("%s never rose above 0", name)
		}
		time.Sleep(10 * time.Millisecond) // polling a metric (no event to wait on)
	}
}
