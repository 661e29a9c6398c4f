package incluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// stopAll stops every skewgate by SIGTERM, one node after the other, as an operator turning the
// mode off or draining the control plane does. A stopping member removes itself before it exits, so
// the first one's front must be gone within stopBound, and after the last one the objects must
// hold the apiservers' own addresses (the fallback) within stopBound: never an empty set. The data
// planes keep running (Envoy keeps its last configuration), so only the endpoints change.
func (c *cluster) stopAll(ctx context.Context, t *testing.T, rec *sliceRecorder, cs kubernetes.Interface, nodes []*frontNode) map[string]any {
	first, last := nodes[0], nodes[1]
	fig := map[string]any{"bound_seconds": secs(stopBound)}
	t0 := time.Now()
	if err := first.StopSkewgate(); err != nil {
		t.Errorf("skewgate of node %s on SIGTERM: %v", first.Name, err)
	}
	exited := time.Now()
	wctx, cancel := context.WithTimeout(ctx, stopBound)
	v, err := rec.waitFor(wctx, "the last front only", exactly(frontIPs(last), front.Port))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	fig["first_removed_seconds"], fig["first_exit_seconds"] = secs(v.At.Sub(t0)), secs(exited.Sub(t0))
	t.Logf("SIGTERM to skewgate of node %s: it exited after %v, its front left the slice %v after the signal (bound %v)",
		first.Name, exited.Sub(t0).Round(time.Millisecond), v.At.Sub(t0).Round(time.Millisecond), stopBound)
	if _, err := waitDNAT(ctx, frontIPs(last)); err != nil {
		t.Fatal(err)
	}

	if top := last.Skewgate().Discovery.Current(); top != nil {
		var known []string
		for _, u := range top.Upstreams {
			known = append(known, fmt.Sprintf("%s=%s ready=%v", u.Name, u.Address, u.Ready))
		}
		for _, u := range top.Unproven {
			known = append(known, fmt.Sprintf("%s=%s unproven", u.Name, u.Address))
		}
		t.Logf("node %s's Topology before its stop (the fallback is its ready upstreams' addresses): %v", last.Name, known)
		fig["last_member_upstreams"] = known
	}
	t1 := time.Now()
	if err := last.StopSkewgate(); err != nil {
		t.Errorf("skewgate of node %s on SIGTERM: %v", last.Name, err)
	}
	exited = time.Now()
	wctx, cancel = context.WithTimeout(ctx, stopBound)
	fb, err := rec.waitFor(wctx, "the apiservers' own addresses", func(v sliceVersion) bool {
		return !v.Deleted && len(v.Addresses) > 0 && v.Port == testbed.APIServerPort && !slices.ContainsFunc(v.Addresses, func(a string) bool { return !slices.Contains(c.endpoints, a) })
	})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	fig["fallback_seconds"], fig["last_exit_seconds"], fig["fallback_addresses"] = secs(fb.At.Sub(t1)), secs(exited.Sub(t1)), fb.Addresses
	t.Logf("SIGTERM to skewgate of node %s, the last member: it exited after %v, the slice fell back to the apiservers %v %v after the signal (bound %v)",
		last.Name, exited.Sub(t1).Round(time.Millisecond), fb.Addresses, fb.At.Sub(t1).Round(time.Millisecond), stopBound)
	if !slices.Equal(fb.Addresses, c.endpoints) {
		t.Logf("note: the fallback lists %v, not every apiserver %v: the last member publishes the ready apiservers its discovery knows an address of", fb.Addresses, c.endpoints)
	}
	ep, err := c.admin.CoreV1().Endpoints(metav1.NamespaceDefault).Get(ctx, serviceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := endpointsIPs(ep); !slices.Equal(got, fb.Addresses) {
		t.Errorf("after the fallback the Endpoints list %v, the EndpointSlice %v: want the same", got, fb.Addresses)
	}
	if _, err := waitDNAT(ctx, fb.Addresses); err != nil {
		t.Fatal(err)
	}
	after := lists(ctx, t, cs, 50)
	fig["after"] = after
	t.Logf("50 skewed lists on the fallback (the apiservers' own addresses, as today): %+v", after)
	if after.ConnErrors != 0 || after.Other != 0 {
		t.Errorf("on the fallback: %+v, want every list answered by an apiserver", after)
	}
	return fig
}

// stopTogether starts every skewgate again (the data planes kept running), waits until the slice
// lists every front, then stops them all by SIGTERM at the same moment, as a drain of the whole
// control plane or a removal of the mode on every node at once does: each member then removes
// itself while the others may still look live to it. The slice must stay non-empty, and must end on
// the apiservers' own addresses within stopBound of the signals. It returns the window from the
// signals to the fallback.
func (c *cluster) stopTogether(ctx context.Context, t *testing.T, rec *sliceRecorder, nodes []*frontNode) (map[string]any, [2]time.Time) {
	for _, n := range nodes {
		if err := n.StartSkewgate(); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, takeoverBound)
	_, err := rec.waitFor(wctx, "every front again", exactly(frontIPs(nodes...), front.Port))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if err := n.StopSkewgate(); err != nil {
				t.Errorf("skewgate of node %s on SIGTERM: %v", n.Name, err)
			}
		})
	}
	wg.Wait()
	exited := time.Now()
	wctx, cancel = context.WithTimeout(ctx, stopBound)
	defer cancel()
	fb, err := rec.waitSettled(wctx, "the apiservers' own addresses", 500*time.Millisecond, func(v sliceVersion) bool {
		return !v.Deleted && len(v.Addresses) > 0 && v.Port == testbed.APIServerPort && !slices.ContainsFunc(v.Addresses, func(a string) bool { return !slices.Contains(c.endpoints, a) })
	})
	fig := map[string]any{"bound_seconds": secs(stopBound), "exit_seconds": secs(exited.Sub(t0)), "final_addresses": fb.Addresses}
	if err != nil {
		t.Errorf("every skewgate stopped at once: %v", err)
		return fig, [2]time.Time{t0, time.Now()}
	}
	fig["fallback_seconds"] = secs(fb.At.Sub(t0))
	t.Logf("SIGTERM to every skewgate at once: all exited after %v, the slice fell back to the apiservers %v %v after the signals (bound %v)",
		exited.Sub(t0).Round(time.Millisecond), fb.Addresses, fb.At.Sub(t0).Round(time.Millisecond), stopBound)
	// Members that leave write without the rate limit they keep between live members (kubesvc: "not
	// while leaving"), so while they stop together their differing views may overwrite each other
	// until the last one exited: counted here, bounded by the fallback's bound.
	leaving := rec.between(t0, fb.At.Add(time.Nanosecond))
	fig["slice_versions_while_leaving"] = len(leaving)
	t.Logf("while every member left at once the slice had %d versions before the fallback", len(leaving))
	return fig, [2]time.Time{t0, fb.At.Add(time.Nanosecond)}
}

// endpointsIPs lists the addresses of an Endpoints object, sorted.
func endpointsIPs(ep *corev1.Endpoints) []string {
	var out []string
	for _, s := range ep.Subsets {
		for _, a := range s.Addresses {
			out = append(out, a.IP)
		}
	}
	slices.Sort(out)
	return out
}
