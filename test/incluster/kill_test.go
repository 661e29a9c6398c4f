package incluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/front"
)

// killNode kills the first node (SIGKILL to its skewgate, its data plane killed too) while the
// client keeps listing: the dead front must leave the slice within the TTL and killSlack, kube-proxy
// must drop it within kubeProxyBound after that, no list may meet a wrong 404 meanwhile (a list
// kube-proxy sends to the dead front fails to connect: counted apart), and none may fail after.
// Then the node starts again and rejoins.
func (c *cluster) killNode(ctx context.Context, t *testing.T, rec *sliceRecorder, cs kubernetes.Interface, nodes []*frontNode) map[string]any {
	dead, survivor := nodes[0], nodes[1]
	want := frontIPs(survivor)
	t0 := time.Now()
	if err := dead.KillSkewgate(); err != nil {
		t.Fatal(err)
	}
	how, err := dead.KillDataPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s killed: skewgate by SIGKILL, data plane: %s", dead.Name, how)
	var during tally
	var left, dropped time.Time
	for deadline := t0.Add(memberTTL + killSlack + kubeProxyBound + 10*time.Second); dropped.IsZero() && time.Now().Before(deadline); {
		during.list(ctx, t, cs)
		if v, ok, _ := rec.latest(); left.IsZero() && ok && exactly(want, front.Port)(v) {
			left = v.At
		}
		if !left.IsZero() {
			if got, err := dnatTargets(front.Port); err != nil {
				t.Fatal(err)
			} else if slices.Equal(got, want) {
				dropped = time.Now()
			}
		}
	}
	fig := map[string]any{"node": dead.Name, "front": dead.IP, "data_plane_kill": how, "during": during, "requests_during": during.total()}
	if left.IsZero() || dropped.IsZero() {
		t.Fatalf("after the kill of node %s the slice (left at %v) or kube-proxy (at %v) never dropped its front %s", dead.Name, left, dropped, dead.IP)
	}
	after := lists(ctx, t, cs, todayRequests)
	fig["slice_seconds"], fig["kube_proxy_seconds"], fig["window_seconds"] = secs(left.Sub(t0)), secs(dropped.Sub(left)), secs(dropped.Sub(t0))
	fig["bound_slice_seconds"], fig["bound_kube_proxy_seconds"] = secs(memberTTL+killSlack), secs(kubeProxyBound)
	fig["after"] = after
	t.Logf("kill of node %s: its front left the slice %v after the kill (bound %v), kube-proxy's rules %v later (bound %v); during the window %+v, after it %+v",
		dead.Name, left.Sub(t0).Round(time.Millisecond), memberTTL+killSlack, dropped.Sub(left).Round(time.Millisecond), kubeProxyBound, during, after)
	if d := left.Sub(t0); d > memberTTL+killSlack {
		t.Errorf("the killed front left the slice %v after the kill, want within the TTL %v + %v", d, memberTTL, killSlack)
	}
	if d := dropped.Sub(left); d > kubeProxyBound {
		t.Errorf("kube-proxy dropped the killed front %v after the slice did, want within %v", d, kubeProxyBound)
	}
	if during.Wrong404 != 0 || during.Other != 0 {
		t.Errorf("during the kill window: %+v, want no wrong 404 and no failure but failed connections to the dead front", during)
	}
	if after.Served != todayRequests {
		t.Errorf("after the slice and kube-proxy converged: %+v of %d, want every list served", after, todayRequests)
	}

	restarted := time.Now()
	dead.start(ctx, t)
	wctx, cancel := context.WithTimeout(ctx, takeoverBound)
	defer cancel()
	v, err := rec.waitFor(wctx, "both fronts again", exactly(frontIPs(nodes...), front.Port))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitDNAT(wctx, frontIPs(nodes...)); err != nil {
		t.Fatal(err)
	}
	fig["rejoin_seconds"] = secs(v.At.Sub(restarted))
	t.Logf("node %s started again: its front is back in the slice %v after its start", dead.Name, v.At.Sub(restarted).Round(time.Millisecond))
	return fig
}

// restartSkewgate restarts one node's skewgate (SIGTERM, then a new process: what an upgrade of its
// static pod does) while its data plane keeps serving and the client keeps listing. The stopping
// member removes itself and rejoins once its new process is ready; meanwhile its data plane answers
// from its last configuration (ext_proc gone: the fail-open route table). No list may fail or meet a
// wrong 404 at any point.
func (c *cluster) restartSkewgate(ctx context.Context, t *testing.T, rec *sliceRecorder, cs kubernetes.Interface, nodes []*frontNode) map[string]any {
	n, other := nodes[1], nodes[0]
	stop := make(chan struct{})
	done := make(chan tally)
	go func() {
		var during tally
		for {
			select {
			case <-stop:
				done <- during
				return
			default:
				during.list(ctx, t, cs)
			}
		}
	}()
	t0 := time.Now()
	if err := n.StopSkewgate(); err != nil {
		t.Errorf("skewgate of node %s on SIGTERM: %v", n.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, stopBound)
	left, err := rec.waitFor(wctx, "the other front only", exactly(frontIPs(other), front.Port))
	cancel()
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	started := time.Now()
	if err := n.StartSkewgate(); err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, takeoverBound)
	defer cancel()
	back, err := rec.waitFor(wctx, "both fronts again", exactly(frontIPs(nodes...), front.Port))
	if err == nil {
		_, err = waitDNAT(wctx, frontIPs(nodes...))
	}
	close(stop)
	during := <-done
	if err != nil {
		t.Fatal(err)
	}
	fig := map[string]any{"node": n.Name, "left_seconds": secs(left.At.Sub(t0)), "rejoin_seconds": secs(back.At.Sub(started)),
		"window_seconds": secs(time.Since(t0)), "during": during}
	t.Logf("restart of node %s's skewgate under traffic (its data plane kept serving): it left the slice %v after SIGTERM, rejoined %v after its new start; %+v",
		n.Name, left.At.Sub(t0).Round(time.Millisecond), back.At.Sub(started).Round(time.Millisecond), during)
	if during.Wrong404 != 0 || during.ConnErrors != 0 || during.Other != 0 || during.Served == 0 {
		t.Errorf("through a skewgate restart: %+v, want every list served", during)
	}
	return fig
}
