package incluster

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/front"
)

// restartFront restarts one node's front (its data plane killed, as a crashed or restarted Envoy
// pod, then started again after frontAway) while its skewgate keeps running and the client keeps
// listing. skewgate's TLS probe of its own front fails, so it stops renewing and the survivor drops
// the front within the TTL and killSlack; lists that kube-proxy sends to the dead front meanwhile
// fail to connect (counted apart), none may meet a wrong 404 or fail otherwise. Once the front
// serves again its member renews and rejoins; every list after that is served.
func (c *cluster) restartFront(ctx context.Context, t *testing.T, rec *sliceRecorder, cs kubernetes.Interface, nodes []*frontNode) map[string]any {
	n, other := nodes[1], nodes[0]
	t0 := time.Now()
	how, err := n.KillDataPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s's front restarted: data plane %s; its skewgate keeps running", n.Name, how)
	var during tally
	var left time.Time
	for deadline := t0.Add(memberTTL + killSlack + 10*time.Second); left.IsZero() && time.Now().Before(deadline); {
		during.list(ctx, t, cs)
		if v, ok, _ := rec.latest(); ok && exactly(frontIPs(other), front.Port)(v) {
			left = v.At
		}
	}
	if left.IsZero() {
		t.Fatalf("the front of node %s, down, never left the slice", n.Name)
	}
	restarted := time.Now()
	if _, err := n.StartDataPlane(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, takeoverBound)
	defer cancel()
	if err := n.WaitDataPlane(wctx); err != nil {
		t.Fatal(err)
	}
	back, err := rec.waitFor(wctx, "both fronts again", exactly(frontIPs(nodes...), front.Port))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitDNAT(wctx, frontIPs(nodes...)); err != nil {
		t.Fatal(err)
	}
	after := lists(ctx, t, cs, todayRequests)
	fig := map[string]any{"node": n.Name, "data_plane_kill": how, "during": during, "left_seconds": secs(left.Sub(t0)),
		"bound_left_seconds": secs(memberTTL + killSlack), "rejoin_seconds": secs(back.At.Sub(restarted)), "after": after}
	t.Logf("front restart of node %s: its front left the slice %v after the kill (bound %v), rejoined %v after its data plane started again; during %+v, after %+v",
		n.Name, left.Sub(t0).Round(time.Millisecond), memberTTL+killSlack, back.At.Sub(restarted).Round(time.Millisecond), during, after)
	if d := left.Sub(t0); d > memberTTL+killSlack {
		t.Errorf("the restarting front left the slice %v after its data plane died, want within the TTL %v + %v", d, memberTTL, killSlack)
	}
	if during.Wrong404 != 0 || during.Other != 0 {
		t.Errorf("while the front was down: %+v, want no wrong 404 and no failure but failed connections to it", during)
	}
	if after.Served != todayRequests {
		t.Errorf("after the front rejoined: %+v of %d, want every list served", after, todayRequests)
	}
	return fig
}
