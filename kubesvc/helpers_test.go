package kubesvc

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/discovery"
)

// fakeSource is a Topology source the test sets.
type fakeSource struct {
	mu sync.Mutex
	t  *discovery.Topology
	ch chan struct{}
}

func newSource(upstreams ...discovery.Upstream) *fakeSource {
	return &fakeSource{t: &discovery.Topology{Upstreams: upstreams}, ch: make(chan struct{})}
}

func (f *fakeSource) Watch() (*discovery.Topology, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t, f.ch
}

func (f *fakeSource) set(upstreams ...discovery.Upstream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = &discovery.Topology{Upstreams: upstreams}
	close(f.ch)
	f.ch = make(chan struct{})
}

func ready(name, addr string) discovery.Upstream {
	return discovery.Upstream{Name: name, Address: addr, Ready: true}
}

// clientStore reads the clientset itself, so a unit test sees every write at once.
type clientStore struct{ c kubernetes.Interface }

func (s clientStore) leases() []*coordinationv1.Lease {
	l, err := s.c.CoordinationV1().Leases(Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: MemberLabel + "=true"})
	if err != nil {
		panic(err)
	}
	var out []*coordinationv1.Lease
	for i := range l.Items {
		out = append(out, &l.Items[i])
	}
	return out
}

func (s clientStore) endpoints() (*corev1.Endpoints, error) {
	return s.c.CoreV1().Endpoints(ServiceNamespace).Get(context.Background(), ServiceName, metav1.GetOptions{})
}

func (s clientStore) slice() (*discoveryv1.EndpointSlice, error) {
	return s.c.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(context.Background(), ServiceName, metav1.GetOptions{})
}

// asLeftByApiservers are the two objects as the apiservers' lease reconciler leaves them.
func asLeftByApiservers(port int32, ips ...string) []runtime.Object {
	d := desired{ips: ips, port: port}
	e := wantEndpoints(&corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: ServiceNamespace}}, d)
	delete(e.Labels, EndpointsManagedByLabel)
	s := wantSlice(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: ServiceNamespace}}, d, "")
	s.Annotations = nil
	delete(s.Labels, discoveryv1.LabelManagedBy)
	return []runtime.Object{e, s}
}

type harness struct {
	t      *testing.T
	c      *Controller
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	src    *fakeSource
	reg    *prometheus.Registry
	probe  error
}

func newHarness(t *testing.T, member, endpoint string, src *fakeSource, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), clock: clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0)), src: src, reg: prometheus.NewRegistry()}
	c, err := New(Config{Client: h.client, Source: src, Member: member, Endpoint: netip.MustParseAddrPort(endpoint),
		Probe: func(context.Context, netip.AddrPort) error { return h.probe }, Clock: h.clock, Registry: h.reg, MaxMembers: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.store = clientStore{h.client}
	c.synced.Store(true)
	h.c = c
	return h
}

// reconcile runs one reconcile and fails the test on an error.
func (h *harness) reconcile() time.Duration {
	h.t.Helper()
	next, err := h.c.reconcile(context.Background())
	if err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	return next
}

// memberLease writes (or renews) another member's Lease as its skewgate would, renewTime from that
// node's clock.
func (h *harness) memberLease(name, endpoint string, renew time.Time) {
	h.t.Helper()
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{MemberLabel: "true"},
			Annotations: map[string]string{EndpointAnnotation: endpoint}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: ptr.To(metav1.NewMicroTime(renew))},
	}
	leases := h.client.CoordinationV1().Leases(Namespace)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
}

// published is the addresses and port of both objects; it fails the test when they disagree.
func (h *harness) published() ([]string, int32) {
	h.t.Helper()
	e, err := clientStore{h.client}.endpoints()
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := clientStore{h.client}.slice()
	if err != nil {
		h.t.Fatal(err)
	}
	var ips, sips []string
	for _, a := range e.Subsets[0].Addresses {
		ips = append(ips, a.IP)
	}
	for _, ep := range s.Endpoints {
		sips = append(sips, ep.Addresses...)
	}
	if len(e.Subsets) != 1 || len(s.Ports) != 1 || e.Subsets[0].Ports[0].Port != *s.Ports[0].Port || len(ips) != len(sips) {
		h.t.Fatalf("Endpoints %+v and EndpointSlice %+v disagree", e.Subsets, s.Endpoints)
	}
	for i := range ips {
		if ips[i] != sips[i] {
			h.t.Fatalf("Endpoints %v, EndpointSlice %v", ips, sips)
		}
	}
	return ips, e.Subsets[0].Ports[0].Port
}

// writes are the update, create, delete and patch actions on the two objects and Leases since the
// last call, as "verb resource/name".
func (h *harness) writes() []string {
	var out []string
	for _, a := range h.client.Actions() {
		switch a.GetVerb() {
		case "update", "create", "delete", "patch":
			name := ""
			switch a := a.(type) {
			case k8stesting.UpdateAction:
				name = a.GetObject().(metav1.Object).GetName()
			case k8stesting.CreateAction:
				name = a.GetObject().(metav1.Object).GetName()
			case k8stesting.DeleteAction:
				name = a.GetName()
			}
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+name)
		}
	}
	h.client.ClearActions()
	return out
}

func notReady(name, addr string) discovery.Upstream {
	return discovery.Upstream{Name: name, Address: addr}
}

func cidrs(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range s {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}

func gvrOf(o runtime.Object) schema.GroupVersionResource {
	if _, ok := o.(*corev1.Endpoints); ok {
		return corev1.SchemeGroupVersion.WithResource("endpoints")
	}
	return discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
}
