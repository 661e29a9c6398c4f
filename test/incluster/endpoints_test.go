package incluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/test/testbed"
)

// The `kubernetes` Service's endpoints as the apiserver writes them (k8s.io/kubernetes v1.36.3
// pkg/controlplane/controller/kubernetesservice: port "https", TCP, the secure port).
const (
	serviceName   = "kubernetes"
	httpsPortName = "https"
	// managedBySkewgate is the mark skewgate puts on the EndpointSlice it writes
	// (discoveryv1.LabelManagedBy, discovery.SkewgateManagedBy), spelled out here so that the test
	// checks the value on the wire; a slice without it was written by someone else.
	managedBySkewgate = "kubesvc.skewgate.io"
)

// adminEndpoints creates `default/kubernetes` Endpoints and EndpointSlice with ips, field by field
// as the v1.36.3 lease reconciler writes them (pkg/controlplane/reconcilers/lease.go and
// endpointsadapter.go): what a cluster that ran that reconciler has when its apiservers move to
// --endpoint-reconciler-type=none.
func adminEndpoints(ctx context.Context, admin kubernetes.Interface, ips []string) error {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: serviceName, Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}}}
	ep.Subsets = []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Name: httpsPortName, Port: testbed.APIServerPort, Protocol: corev1.ProtocolTCP}}}}
	for _, ip := range ips {
		ep.Subsets[0].Addresses = append(ep.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip})
	}
	if _, err := admin.CoreV1().Endpoints(metav1.NamespaceDefault).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("admin: create Endpoints kubernetes: %w", err)
	}
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: serviceName, Labels: map[string]string{discoveryv1.LabelServiceName: serviceName}}}
	s.AddressType = discoveryv1.AddressTypeIPv4
	s.Endpoints = apiserverEndpoints(ips)
	s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To(httpsPortName), Port: ptr.To[int32](testbed.APIServerPort), Protocol: ptr.To(corev1.ProtocolTCP)}}
	if _, err := admin.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("admin: create EndpointSlice kubernetes: %w", err)
	}
	return nil
}

func apiserverEndpoints(ips []string) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, len(ips))
	for i, ip := range ips {
		out[i] = discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return out
}

// sliceVersion is one version of the `kubernetes` EndpointSlice as a watch delivered it.
type sliceVersion struct {
	At              time.Time
	ResourceVersion string
	// Addresses are its ready endpoints' addresses, sorted; Port its port.
	Addresses []string
	Port      int32
	// Skewgate: it carries skewgate's managed-by mark. Deleted: the watch saw it go.
	Skewgate, Deleted bool
}

// sliceRecorder keeps every version of the `kubernetes` EndpointSlice an informer sees, from the
// test's start to its end: kube-proxy reads the same object through the same kind of watch, so a
// version the recorder never saw is one kube-proxy may have missed too, and one it saw (an empty
// one above all) is one kube-proxy may have programmed.
type sliceRecorder struct {
	mu       sync.Mutex
	versions []sliceVersion
	changed  chan struct{} // closed and replaced at every version
}

// watchSlice starts the recorder; it stops when the test ends.
func (c *cluster) watchSlice(t *testing.T) *sliceRecorder {
	t.Helper()
	r := &sliceRecorder{changed: make(chan struct{})}
	lw := cache.NewListWatchFromClient(c.admin.DiscoveryV1().RESTClient(), "endpointslices", metav1.NamespaceDefault,
		fields.OneTermEqualSelector("metadata.name", serviceName))
	inf := cache.NewSharedIndexInformer(lw, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.add(o, false) },
		UpdateFunc: func(_, o any) { r.add(o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			r.add(o, true)
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go inf.Run(stop)
	t.Cleanup(func() { close(stop) })
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("the EndpointSlice recorder never synced")
	}
	return r
}

func (r *sliceRecorder) add(o any, deleted bool) {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	v := sliceVersion{At: time.Now(), ResourceVersion: s.ResourceVersion, Deleted: deleted,
		Skewgate: s.Labels[discoveryv1.LabelManagedBy] == managedBySkewgate}
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || *e.Conditions.Ready {
			v.Addresses = append(v.Addresses, e.Addresses...)
		}
	}
	slices.Sort(v.Addresses)
	if len(s.Ports) > 0 && s.Ports[0].Port != nil {
		v.Port = *s.Ports[0].Port
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, v)
	close(r.changed)
	r.changed = make(chan struct{})
}

// latest is the newest version and a channel closed when a newer one arrives.
func (r *sliceRecorder) latest() (sliceVersion, bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.versions) == 0 {
		return sliceVersion{}, false, r.changed
	}
	return r.versions[len(r.versions)-1], true, r.changed
}

// waitFor waits until the newest version satisfies ok and returns it.
func (r *sliceRecorder) waitFor(ctx context.Context, what string, ok func(sliceVersion) bool) (sliceVersion, error) {
	for {
		v, any, changed := r.latest()
		if any && ok(v) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("the kubernetes EndpointSlice never became %s: last %+v: %w", what, v, ctx.Err())
		case <-changed:
		}
	}
}

// waitSettled is waitFor, and then the version must stay the newest for quiet: writers still at
// work (members leaving at once) write again within it, and then it waits on.
func (r *sliceRecorder) waitSettled(ctx context.Context, what string, quiet time.Duration, ok func(sliceVersion) bool) (sliceVersion, error) {
	for {
		v, err := r.waitFor(ctx, what, ok)
		if err != nil {
			return v, err
		}
		now, _, changed := r.latest()
		if now.ResourceVersion != v.ResourceVersion {
			continue
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("the kubernetes EndpointSlice never settled on %s: %w", what, ctx.Err())
		case <-changed:
		case <-time.After(quiet):
			return v, nil
		}
	}
}

// between lists the versions seen in [from, to).
func (r *sliceRecorder) between(from, to time.Time) []sliceVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sliceVersion
	for _, v := range r.versions {
		if !v.At.Before(from) && v.At.Before(to) {
			out = append(out, v)
		}
	}
	return out
}

// emptyVersions lists every version seen with no ready endpoint, or deleted: a moment when the
// Service had no endpoint at all.
func (r *sliceRecorder) emptyVersions() (empty []sliceVersion, seen int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.versions {
		if v.Deleted || len(v.Addresses) == 0 {
			empty = append(empty, v)
		}
	}
	return empty, len(r.versions)
}

// fightWindow: a slice that goes back and forth three times between two sets of endpoints (A, B, A,
// B, A) within this time is a write fight: writers that disagree and each write their own set
// again without backing off. skewgate's members back off from overwriting a member whose view
// differs (2s, doubling per streak), so a lasting disagreement between them reads A, B, A, B, A
// over about 6s and is not caught here (skewgate counts it in skewgate_kubesvc_peer_overwrites_total
// and logs an error); they yield to a rival for 5s and more. One or two reversals can be legitimate: two members whose views differ for a
// moment (one overwrite each way), right after a change the test made; those are counted
// (reversals) but not refused.
const fightWindow = 5 * time.Second

// reversals lists every version that went back to the addresses of the version two before it
// within fightWindow (A, B, A); fights lists the versions that completed three reversals in a row
// within fightWindow (A, B, A, B, A).
func (r *sliceRecorder) reversals() (reversals, fights []sliceVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	back := func(i int) bool {
		a, b, c := r.versions[i-2], r.versions[i-1], r.versions[i]
		return slices.Equal(a.Addresses, c.Addresses) && !slices.Equal(a.Addresses, b.Addresses) && c.At.Sub(a.At) < fightWindow
	}
	for i := 2; i < len(r.versions); i++ {
		if !back(i) {
			continue
		}
		reversals = append(reversals, r.versions[i])
		if i >= 4 && back(i-1) && back(i-2) && r.versions[i].At.Sub(r.versions[i-4].At) < fightWindow {
			fights = append(fights, r.versions[i])
		}
	}
	return reversals, fights
}

// exactly is a waitFor condition: the slice lists exactly ips (sorted) on port.
func exactly(ips []string, port int32) func(sliceVersion) bool {
	return func(v sliceVersion) bool { return !v.Deleted && v.Port == port && slices.Equal(v.Addresses, ips) }
}
