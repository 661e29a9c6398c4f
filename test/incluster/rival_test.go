package incluster

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// The rival writer and skewgate's answer to it (kubesvc/rival.go): after a rival's write a member
// waits rivalFirstBackoff before it takes the objects back once, twice as long after each next one.
const (
	rivalWindow   = 30 * time.Second
	rivalInterval = time.Second
	// rivalFirstBackoff is skewgate's first wait after a rival write.
	rivalFirstBackoff = 5 * time.Second
	// rivalListsPerTick: the skewed lists the client makes after each pass of the rival.
	rivalListsPerTick = 10
)

// takeBacks is how many times one member may take the objects back within w when a rival rewrites
// them at once every time: its k-th take-back comes after 5s, 10s, ... 5s*2^(k-1) of backoff.
func takeBacks(w time.Duration) int {
	n, sum := 0, time.Duration(0)
	for d := rivalFirstBackoff; sum+d <= w; d *= 2 {
		sum += d
		n++
	}
	return n
}

// rivalWriter runs a rival for rivalWindow: every rivalInterval it does what an apiserver whose
// lease reconciler is still on does (pkg/controlplane/reconcilers/lease.go doReconcile and
// endpointsadapter.go): when the objects differ from the apiservers' addresses, it rewrites both,
// the EndpointSlice with its own labels only. skewgate must notice it (its rival counter), must not
// fight it (at most takeBacks(rivalWindow)+1 slice writes per member in the window, where a write
// fight would be one per rival write), and must take the objects back once the rival is gone.
func (c *cluster) rivalWriter(ctx context.Context, t *testing.T, rec *sliceRecorder, cs kubernetes.Interface, nodes []*frontNode) map[string]any {
	updated := map[string]string{"object": "endpointslice", "result": "updated"}
	rivals0 := nodesMetric(t, nodes, "skewgate_kubesvc_rival_writes_total", nil)
	writes0 := nodesMetric(t, nodes, "skewgate_kubesvc_writes_total", updated)
	var rivalWrites, conflicts int
	var during tally
	start := time.Now()
	tick := time.NewTicker(rivalInterval)
	for time.Since(start) < rivalWindow {
		wrote, err := c.rivalWrite(ctx)
		switch {
		case apierrors.IsConflict(err):
			conflicts++ // skewgate wrote in between: the reconciler retries at its next interval too
		case err != nil:
			t.Fatalf("rival write: %v", err)
		case wrote:
			rivalWrites++
		}
		// The client keeps listing: while skewgate yields, kube-proxy sends it to the apiservers, and
		// it meets today's wrong 404s; it must meet nothing worse.
		for range rivalListsPerTick {
			during.list(ctx, t, cs)
		}
		<-tick.C
	}
	tick.Stop()
	end := time.Now()
	rivals := nodesMetric(t, nodes, "skewgate_kubesvc_rival_writes_total", nil) - rivals0
	writes := nodesMetric(t, nodes, "skewgate_kubesvc_writes_total", updated) - writes0
	versions := rec.between(start, end)
	fronts := frontIPs(nodes...)
	onFronts := 0
	for _, v := range versions {
		if exactly(fronts, front.Port)(v) {
			onFronts++
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*rivalWindow)
	defer cancel()
	back, err := rec.waitFor(wctx, "the fronts again, skewgate's", func(v sliceVersion) bool { return v.Skewgate && exactly(fronts, front.Port)(v) })
	if err != nil {
		t.Fatal(err)
	}
	bound := len(nodes) * (takeBacks(rivalWindow) + 1)
	fig := map[string]any{"window_seconds": secs(rivalWindow), "rival_interval_seconds": secs(rivalInterval),
		"rival_writes": rivalWrites, "rival_conflicts": conflicts, "skewgate_rival_writes_counted": rivals,
		"skewgate_slice_writes": writes, "lists_during": during, "bound_skewgate_slice_writes": bound, "slice_versions": len(versions),
		"slice_versions_on_fronts": onFronts, "take_back_seconds": secs(back.At.Sub(end)),
		"bound_take_back_seconds": secs(rivalFirstBackoff<<takeBacks(rivalWindow) + killSlack)}
	t.Logf("rival writer for %v (every %v): it wrote %d times (%d conflicts); skewgate counted %v rival writes, wrote the slice %v times (bound %d), %d slice versions of which %d on the fronts; skewgate took the objects back %v after the rival stopped",
		rivalWindow, rivalInterval, rivalWrites, conflicts, rivals, writes, bound, len(versions), onFronts, back.At.Sub(end).Round(time.Millisecond))
	t.Logf("skewed lists during the rival window: %+v", during)
	if during.ConnErrors != 0 || during.Other != 0 {
		t.Errorf("skewed lists during the rival window: %+v, want each answered (a wrong 404 while the apiservers are listed is today's)", during)
	}
	if rivalWrites == 0 {
		t.Fatal("the rival never wrote: the objects already held the apiservers' addresses")
	}
	if rivals < 1 {
		t.Errorf("skewgate_kubesvc_rival_writes_total rose by %v over %d rival writes, want the rival noticed", rivals, rivalWrites)
	}
	if writes > float64(bound) {
		for _, v := range versions {
			t.Logf("slice version in the rival window: %s %s %v skewgate=%v", v.At.Format("15:04:05.000"), v.ResourceVersion, v.Addresses, v.Skewgate)
		}
		t.Errorf("skewgate wrote the slice %v times in %v against a rival, want at most %d (its backoff): a write fight", writes, rivalWindow, bound)
	}
	// Once the rival is gone a member takes the objects back when its backoff ends: at most the
	// longest backoff a member reaches within the window, plus the slack of a write.
	if longest := rivalFirstBackoff << takeBacks(rivalWindow); back.At.Sub(end) > longest+killSlack {
		t.Errorf("skewgate took the objects back %v after the rival stopped, want within its longest backoff %v + %v", back.At.Sub(end), longest, killSlack)
	}
	if float64(len(versions)) > float64(rivalWrites)+writes {
		t.Errorf("%d slice versions in the window, more than the rival's %d and skewgate's %v writes", len(versions), rivalWrites, writes)
	}
	return fig
}

// rivalWrite is one pass of the apiservers' lease reconciler over both objects; wrote says whether
// it changed anything.
func (c *cluster) rivalWrite(ctx context.Context) (bool, error) {
	wrote := false
	sliceClient := c.admin.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	s, err := sliceClient.Get(ctx, serviceName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	want := s.DeepCopy()
	want.Labels = map[string]string{discoveryv1.LabelServiceName: serviceName}
	want.AddressType = discoveryv1.AddressTypeIPv4
	want.Endpoints = apiserverEndpoints(c.endpoints)
	want.Ports = []discoveryv1.EndpointPort{{Name: ptr.To(httpsPortName), Port: ptr.To[int32](testbed.APIServerPort), Protocol: ptr.To(corev1.ProtocolTCP)}}
	if !sliceIs(s, want) {
		if _, err := sliceClient.Update(ctx, want, metav1.UpdateOptions{FieldManager: "kube-apiserver"}); err != nil {
			return false, err
		}
		wrote = true
	}
	eps := c.admin.CoreV1().Endpoints(metav1.NamespaceDefault)
	ep, err := eps.Get(ctx, serviceName, metav1.GetOptions{})
	if err != nil {
		return wrote, err
	}
	if !slices.Equal(endpointsIPs(ep), c.endpoints) || len(ep.Subsets) != 1 || len(ep.Subsets[0].Ports) != 1 || ep.Subsets[0].Ports[0].Port != testbed.APIServerPort {
		ep = ep.DeepCopy()
		if ep.Labels == nil {
			ep.Labels = map[string]string{}
		}
		ep.Labels[discoveryv1.LabelSkipMirror] = "true" // other labels kept, as lease.go does
		ep.Subsets = []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Name: httpsPortName, Port: testbed.APIServerPort, Protocol: corev1.ProtocolTCP}}}}
		for _, ip := range c.endpoints {
			ep.Subsets[0].Addresses = append(ep.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip})
		}
		if _, err := eps.Update(ctx, ep, metav1.UpdateOptions{FieldManager: "kube-apiserver"}); err != nil {
			return wrote, err
		}
		wrote = true
	}
	return wrote, nil
}

// sliceIs compares what the lease reconciler compares (EnsureEndpointSliceFromEndpoints): labels,
// endpoints, ports.
func sliceIs(a, b *discoveryv1.EndpointSlice) bool {
	if len(a.Labels) != len(b.Labels) || a.Labels[discoveryv1.LabelServiceName] != b.Labels[discoveryv1.LabelServiceName] {
		return false
	}
	var ipsA, ipsB []string
	for _, e := range a.Endpoints {
		ipsA = append(ipsA, e.Addresses...)
	}
	for _, e := range b.Endpoints {
		ipsB = append(ipsB, e.Addresses...)
	}
	slices.Sort(ipsA)
	slices.Sort(ipsB)
	return slices.Equal(ipsA, ipsB) && len(a.Ports) == 1 && a.Ports[0].Port != nil && *a.Ports[0].Port == *b.Ports[0].Port
}
