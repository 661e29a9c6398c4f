package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// restartTrafficOps are what the clients of TestColdStartRestarts ask for: two shared reads and a
// list of the skewed API, which only new (v1.36) serves.
var restartTrafficOps = []trafficOp{
	{name: "list namespaces", path: "/api/v1/namespaces?limit=5", shared: true},
	{name: "get configmap", path: "/api/v1/namespaces/default/configmaps/coldstart", shared: true},
	{name: "list " + mapResource, path: "/apis/" + mapGroup + "/v1/" + mapResource + "?limit=5"},
}

// TestColdStartRestarts restarts the parts of a co-located node while clients use its front: (a)
// skewgate of node old restarts while its data plane serves: the data plane keeps its last config
// and ext_proc fails open to the route table, so clients see nothing but 200; (a') the same
// skewgate SIGKILLed while clients read, write and watch through the front (killSkewgate): every
// request answered as before, no acknowledged write lost, the watch kept; (b) the data plane of
// node old restarts while skewgate runs: clients see refused connections while it is down (counted
// apart), and 200 again once it serves; (c) node new dies (apiserver SIGKILLed, its skewgate and
// data plane stopped) while clients use node old's front: every shared read that started after the
// kill gets 200; the skewed API, served by new only, is reported.
func TestColdStartRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	nodes := newNodes(t, tb, true, "old", "new")
	old, nw := nodes[0], nodes[1]
	for _, n := range nodes {
		startNode(t, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The objects the clients read, written to each apiserver directly.
	direct := kubernetes.NewForConfigOrDie(tb.RESTConfig(tb.MustApiserver("old").URL(), testbed.AdminByToken))
	if _, err := direct.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coldstart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	directNew := kubernetes.NewForConfigOrDie(tb.RESTConfig(tb.MustApiserver("new").URL(), testbed.AdminByToken))
	if _, err := directNew.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, mapObject("coldstart"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logTopology(t, old)
	figures := map[string]any{}

	t.Run("skewgate", func(t *testing.T) { figures["restart_skewgate"] = restartSkewgate(ctx, t, tb, old) })
	t.Run("sigkill skewgate", func(t *testing.T) { figures["sigkill_skewgate"] = killSkewgate(ctx, t, tb, old) })
	t.Run("dataplane", func(t *testing.T) { figures["restart_data_plane"] = restartDataPlane(ctx, t, tb, old) })
	t.Run("kill node", func(t *testing.T) { figures["kill_node"] = killNode(t, tb, nw, old) })
	writeResults(t, &env{tb: tb, f: &front.Front{DataPlane: nodesDataPlane()}}, figures)
}

// logTopology logs the upstreams skewgate of n routes to.
func logTopology(t *testing.T, n *front.Node) {
	t.Helper()
	top := n.Skewgate().Discovery.Current()
	if top == nil {
		t.Fatalf("node %s: no Topology", n.Name)
	}
	for _, u := range top.Upstreams {
		t.Logf("node %s routes to %s at %s (%s, from %s, ready %v)", n.Name, u.Name, u.Address, u.Version, u.Source, u.Ready)
	}
}

// warm is how long clients run before and after a disruption; away is how long a stopped part
// stays down before it starts again, as a restarted process or container is.
const (
	warm = time.Second
	away = time.Second
)

func restartDataPlane(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *front.Node) map[string]any {
	tr := startTraffic(t, tb, n.URL, 4, restartTrafficOps)
	time.Sleep(warm)
	down := time.Now()
	n.StopDataPlane()
	stopped := time.Now()
	time.Sleep(away)
	seed, err := n.StartDataPlane()
	if err != nil {
		tr.halt()
		t.Fatal(err)
	}
	started := time.Now()
	listenErr := n.WaitDataPlane(ctx)
	listening := time.Now()
	time.Sleep(2 * warm)
	calls := tr.halt()
	if listenErr != nil {
		t.Fatal(listenErr)
	}
	var firstOK time.Time
	for _, c := range calls {
		if c.start.After(started) && c.code == http.StatusOK && (firstOK.IsZero() || c.end.Before(firstOK)) {
			firstOK = c.end
		}
	}
	all, byOp := count(calls, func(call) bool { return true })
	after, _ := count(calls, func(c call) bool { return c.start.After(listening) })
	t.Logf("data plane of node %s restarted while skewgate runs (stop %v, start to listener %v, start to first 200 %v; seed %d): %d requests, by outcome%s; started once it listened again%s",
		n.Name, stopped.Sub(down).Round(time.Millisecond), listening.Sub(started).Round(time.Millisecond), firstOK.Sub(started).Round(time.Millisecond), seed, len(calls), all, after)
	logFailures(t, "data plane restart", calls)
	if firstOK.IsZero() {
		t.Fatal("no request succeeded after the data plane restarted")
	}
	bad := violations{phase: "data plane restart", want: "200 (or, before it listened again, a transport error)"}
	for _, c := range calls {
		switch {
		case c.code == http.StatusOK:
		case c.code == 0 && c.start.Before(listening):
			// Refused, or cut by the stop: the only thing a client may see while nothing listens.
		default:
			bad.add(c)
		}
	}
	bad.report(t)
	return map[string]any{"requests": len(calls), "by_outcome": all, "by_op": byOp, "started_after_listener": after,
		"data_plane_seed": strconv.FormatUint(seed, 10), "data_plane_away_ms": ms(started.Sub(down)), "stop_ms": ms(stopped.Sub(down)), "start_to_listener_ms": ms(listening.Sub(started)),
		"start_to_first_200_ms": ms(firstOK.Sub(started))}
}

func killNode(t *testing.T, tb *testbed.Testbed, dead, survivor *front.Node) map[string]any {
	tr := startTraffic(t, tb, survivor.URL, 4, restartTrafficOps)
	time.Sleep(warm)
	killed := time.Now()
	killErr := tb.Kill(dead.Name)
	exited := time.Now()
	dead.StopDataPlane()
	sgErr := dead.StopSkewgate()
	time.Sleep(3 * warm) // health checks and probes notice; clients keep reading
	calls := tr.halt()
	if killErr != nil {
		t.Fatal(killErr)
	}
	if sgErr != nil {
		t.Errorf("skewgate of node %s ended with %v", dead.Name, sgErr)
	}
	all, byOp := count(calls, func(call) bool { return true })
	inFlight, _ := count(calls, func(c call) bool { return c.op.shared && c.start.Before(exited) && c.end.After(killed) })
	// Until the front's health checks take the dead apiserver out (2 failed checks at test/front's
	// 200 ms probe interval, plus the check in flight: 3 intervals), a read may still meet its
	// closing connection, which Envoy answers 503 (a reset, or a connection failure: never a 404).
	// After that window every read is 200.
	const detect = 3 * 200 * time.Millisecond
	seen := exited.Add(detect)
	sharedWindow, _ := count(calls, func(c call) bool { return c.op.shared && !c.start.Before(exited) && c.start.Before(seen) })
	sharedAfter, _ := count(calls, func(c call) bool { return c.op.shared && !c.start.Before(seen) })
	_, afterByOp := count(calls, func(c call) bool { return !c.start.Before(exited) })
	t.Logf("node %s killed (apiserver exited after %v) while clients use node %s's front: %d requests, by outcome%s; shared reads in flight at the kill%s; started after it%s",
		dead.Name, exited.Sub(killed).Round(time.Millisecond), survivor.Name, len(calls), all, inFlight, sharedAfter)
	logFailures(t, "kill node", calls)
	notFound := violations{phase: "kill node", want: "anything but a wrong 404"}
	for _, c := range calls {
		if c.code == http.StatusNotFound {
			notFound.add(c)
		}
	}
	notFound.report(t)
	for k, v := range sharedAfter {
		if k != "200" {
			t.Errorf("kill node: %d shared reads started %v after the kill or later got %s through node %s's front, want 200", v, detect, k, survivor.Name)
		}
	}
	for k, v := range sharedWindow {
		if k != "200" && k != "503" {
			t.Errorf("kill node: %d shared reads started within %v of the kill got %s through node %s's front, want 200 or 503", v, detect, k, survivor.Name)
		}
	}
	if sharedAfter["200"] == 0 {
		t.Error("kill node: no shared read after the kill: the phase proves nothing")
	}
	// README: the skewed API, served by the killed node's apiserver only, answers 503 once it is
	// gone, never a 404 nor anything else.
	skewedAfter, _ := count(calls, func(c call) bool { return !c.op.shared && !c.start.Before(exited) })
	for k, v := range skewedAfter {
		if k != "503" {
			t.Errorf("kill node: %d requests for the skewed API started after the kill got %s through node %s's front, want 503", v, k, survivor.Name)
		}
	}
	if skewedAfter["503"] == 0 {
		t.Error("kill node: no request for the skewed API after the kill: the phase proves nothing")
	}
	mustKubectl(t, survivor.Kubeconfig(testbed.AdminByToken), "get", "ns")
	return map[string]any{"requests": len(calls), "by_outcome": all, "by_op": byOp, "shared_in_flight_at_kill": inFlight,
		"shared_started_after_kill": sharedAfter, "shared_started_in_detection_window": sharedWindow,
		"detection_window_ms": ms(detect), "skewed_started_after_kill": skewedAfter, "started_after_kill_by_op": afterByOp, "kill_to_exit_ms": ms(exited.Sub(killed))}
}
