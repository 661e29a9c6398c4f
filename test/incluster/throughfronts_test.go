package incluster

import (
	"context"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/test/artifact"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Bounds of TestInClusterClientsThroughFronts.
const (
	// memberTTL is every member's --kubernetes-endpoints-ttl: the smallest skewgate accepts, so the
	// failure modes run in seconds (the default is the apiserver reconciler's 15s).
	memberTTL = 5 * time.Second
	// takeoverBound: from the skewgates' start to the slice listing both fronts (first Topology,
	// data plane listening, first heartbeat, write).
	takeoverBound = 30 * time.Second
	// kubeProxyBound: from a slice version to kube-proxy's nat table programming it
	// (--iptables-min-sync-period 1s by default).
	kubeProxyBound = 5 * time.Second
	// killSlack: what a dead member may take beyond the TTL to leave the slice (the survivor's
	// informer and queue, one write, the recorder's watch).
	killSlack = 3 * time.Second
	// stopBound: from SIGTERM to a stopping member's removal, and to the fallback once the last one
	// stops (it removes itself before it exits: no TTL to wait out).
	stopBound = 3 * time.Second
	// namedRequests: lists of the client that verifies the front for kubernetes.default.svc.
	namedRequests = 50
)

// TestInClusterClientsThroughFronts is TestInClusterClientsToday with the kubernetes-endpoints mode
// on: the apiservers run --endpoint-reconciler-type=none, the admin has left `default/kubernetes`
// Endpoints and EndpointSlice as the lease reconciler wrote them (the apiservers' addresses), and
// each node's skewgate (`skewgate serve --kubernetes-endpoints`, beside its apiserver and its data
// plane) heartbeats a member Lease and writes the live fronts into both objects. The real kube-proxy
// programs the ClusterIP from them, and the same in-cluster client makes the same skewed lists, each
// on a new connection: none may meet a wrong 404; nor may a client that verifies the fronts for
// kubernetes.default.svc, as a client of that name does. Then the failure modes, each against its
// bound: a node killed, a skewgate restarted under traffic, a front restarted under traffic (its
// skewgate running), a rival writer (an apiserver still on the lease
// reconciler), every skewgate stopped (fallback to the apiservers), one after the other and all at
// once. A recorder watches the EndpointSlice from start to end: no version may be empty, and it may
// never flap (A, B, A, B, A within fightWindow).
func TestInClusterClientsThroughFronts(t *testing.T) {
	c := startClusterWith(t, true)
	rec := c.watchSlice(t)
	cfg, cs := c.serviceAccountClient(t, "operators", "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	figures := map[string]any{
		"member_ttl_seconds": secs(memberTTL), "apiserver_endpoints": c.endpoints, "cluster_ip": testbed.KubernetesServiceIP,
		"kube_proxy_version": testbed.NewVersion, "apiserver_versions": map[string]string{"old": testbed.OldVersion, "new": testbed.NewVersion},
		"skewed_resource": mapResource + "." + mapGroup, "connection_per_call": true, "apiserver_reconciler": "none",
	}
	artifact.Write(t, dataPlaneName(), figures)

	nodes, started := c.startFrontNodes(t, memberTTL)
	fronts := frontIPs(nodes...)
	wctx, wcancel := context.WithTimeout(ctx, takeoverBound)
	v, err := rec.waitFor(wctx, "exactly the fronts", exactly(fronts, front.Port))
	wcancel()
	if err != nil {
		t.Fatal(err)
	}
	if !v.Skewgate {
		t.Errorf("the slice listing the fronts does not carry skewgate's managed-by mark: %+v", v)
	}
	takeover := v.At.Sub(started)
	programmed, err := waitDNAT(ctx, fronts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the EndpointSlice lists exactly the fronts %v %v after the skewgates started; kube-proxy programmed them %v later",
		fronts, takeover.Round(time.Millisecond), programmed.Sub(v.At).Round(time.Millisecond))
	ep, err := c.admin.CoreV1().Endpoints(metav1.NamespaceDefault).Get(ctx, serviceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := endpointsIPs(ep); !slices.Equal(got, fronts) || ep.Labels[discoveryv1.LabelSkipMirror] != "true" {
		t.Errorf("Endpoints kubernetes: %v, labels %v; want the fronts %v and %s=true", got, ep.Labels, fronts, discoveryv1.LabelSkipMirror)
	}
	figures["fronts"] = fronts
	figures["takeover_seconds"] = secs(takeover)
	figures["takeover_kube_proxy_seconds"] = secs(programmed.Sub(v.At))

	start := time.Now()
	steady := lists(ctx, t, cs, todayRequests)
	t.Logf("in-cluster client through the ClusterIP and the fronts: %+v of %d skewed lists in %v", steady, todayRequests, time.Since(start).Round(time.Millisecond))
	figures["steady"] = map[string]any{"requests": todayRequests, "counts": steady, "seconds": secs(time.Since(start))}
	if steady.Wrong404 != 0 || steady.ConnErrors != 0 || steady.Other != 0 || steady.Served != todayRequests {
		t.Errorf("through the fronts: %+v of %d skewed lists, want every one served", steady, todayRequests)
	}
	versions := versionSplit(t, cs, 50)
	figures["steady"].(map[string]any)["version_sample"] = versions
	// A client of https://kubernetes.default.svc: the cluster's DNS answers the ClusterIP, and the
	// client verifies the front's certificate for the name (the node's apiserver.crt carries it).
	byName := rest.CopyConfig(cfg)
	byName.TLSClientConfig.ServerName = testbed.ServingSNI
	named := lists(ctx, t, kubernetes.NewForConfigOrDie(byName), namedRequests)
	figures["by_name"] = map[string]any{"server_name": byName.TLSClientConfig.ServerName, "requests": namedRequests, "counts": named}
	t.Logf("in-cluster client verifying %s through the ClusterIP and the fronts: %+v of %d", byName.TLSClientConfig.ServerName, named, namedRequests)
	if named.Served != namedRequests {
		t.Errorf("a client of https://%s through the fronts: %+v of %d, want every list served", byName.TLSClientConfig.ServerName, named, namedRequests)
	}

	figures["kill"] = c.killNode(ctx, t, rec, cs, nodes)
	figures["skewgate_restart"] = c.restartSkewgate(ctx, t, rec, cs, nodes)
	figures["front_restart"] = c.restartFront(ctx, t, rec, cs, nodes)
	figures["rival"] = c.rivalWriter(ctx, t, rec, cs, nodes)
	figures["stop"] = c.stopAll(ctx, t, rec, cs, nodes)
	var leaving [2]time.Time
	figures["stop_together"], leaving = c.stopTogether(ctx, t, rec, nodes)

	reversals, fights := rec.reversals()
	figures["slice_reversals"], figures["slice_fights"] = len(reversals), len(fights)
	if len(reversals) != 0 || len(fights) != 0 {
		for _, v := range rec.between(time.Time{}, time.Now()) {
			t.Logf("EndpointSlice version %s at %s: %v port %d skewgate=%v", v.ResourceVersion, v.At.Format("15:04:05.000"), v.Addresses, v.Port, v.Skewgate)
		}
		t.Logf("the EndpointSlice went back to the endpoints of two versions before %d times within %v (every version is logged above)", len(reversals), fightWindow)
	}
	// The fights of members leaving together are stopTogether's to bound; every other one is refused.
	fights = slices.DeleteFunc(fights, func(v sliceVersion) bool { return !v.At.Before(leaving[0]) && v.At.Before(leaving[1]) })
	figures["slice_fights_outside_leaving"] = len(fights)
	if len(fights) != 0 {
		t.Errorf("the kubernetes EndpointSlice flapped: %d times it went back and forth three times within %v (writers fighting), first at %s",
			len(fights), fightWindow, fights[0].At.Format("15:04:05.000"))
	}
	empty, seen := rec.emptyVersions()
	figures["slice_versions_seen"] = seen
	figures["empty_slice_versions"] = len(empty)
	if len(empty) != 0 {
		t.Errorf("the kubernetes EndpointSlice had no endpoint at some moment: %+v (of %d versions seen)", empty, seen)
	}
	t.Logf("EndpointSlice recorder: %d versions seen, %d empty", seen, len(empty))
}
