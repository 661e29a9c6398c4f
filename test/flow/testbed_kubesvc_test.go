package flow

import (
	"bytes"
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/kubeadm"
	"github.com/skewgate/skewgate/kubesvc"
	"github.com/skewgate/skewgate/test/testbed"
)

// staticTopology stands in for discovery: two ready apiservers on documentation addresses (the
// apiserver refuses loopback endpoints, and nothing here connects to them).
type staticTopology struct{ t *discovery.Topology }

func (s staticTopology) Watch() (*discovery.Topology, <-chan struct{}) { return s.t, nil }

// TestTestbedKubernetesEndpoints: against a real v1.36.3 apiserver (--endpoint-reconciler-type=none)
// and with only the RBAC `skewgate kubeadm rbac --kubernetes-endpoints` renders, two members take
// the kubernetes endpoints over from the apiservers' addresses, the apiserver stores exactly what
// they write (no write after they agree), a member whose front stops answering leaves within its
// TTL, a stopping last member hands the endpoints back to the apiservers, and a rival write is
// counted and waited out.
func TestTestbedKubernetesEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the testbed (etcd and a kube-apiserver)")
	}
	if kubeadm.KubernetesEndpointsNamespace != kubesvc.Namespace {
		t.Fatalf("kubeadm renders namespace %s, kubesvc uses %s", kubeadm.KubernetesEndpointsNamespace, kubesvc.Namespace)
	}
	tb := testbed.StartT(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{{Name: "cp", Version: testbed.NewVersion}}})
	url := tb.Apiservers()[0].URL()
	ctx := context.Background()
	arc := tb.RESTConfig(url, testbed.AdminByToken)
	arc.WarningHandler = rest.NoWarnings{} // v1 Endpoints is deprecated, and still what kube-proxy's peers read
	admin := kubernetes.NewForConfigOrDie(arc)
	applyRBAC(t, admin)

	// The objects as an admin finds them after the apiservers' lease reconciler ran.
	port := int32(6443)
	asLeft := func(ips ...string) (*corev1.Endpoints, *discoveryv1.EndpointSlice) {
		e := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
			Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}}}}}
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}}}
		for _, ip := range ips {
			e.Subsets[0].Addresses = append(e.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip})
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		return e, s
	}
	e, s := asLeft("192.0.2.10", "192.0.2.11")
	if _, err := admin.CoreV1().Endpoints("default").Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// skewgate's own credential: user skewgate, bound by nothing but the rendered RBAC.
	pair, err := tb.PKI.IssueClient(tb.PKI.ClusterCA(), "skewgate-kubesvc", kubeadm.User)
	if err != nil {
		t.Fatal(err)
	}
	rc := tb.RESTConfig(url, testbed.AdminByCert)
	rc.CertFile, rc.KeyFile, rc.WarningHandler = pair.Cert, pair.Key, rest.NoWarnings{}
	restricted := kubernetes.NewForConfigOrDie(rc)
	checkLeastPrivilege(t, admin, restricted)

	src := staticTopology{&discovery.Topology{Upstreams: []discovery.Upstream{
		{Name: "cp1", Address: "192.0.2.10:6443", Ready: true}, {Name: "cp2", Address: "192.0.2.11:6443", Ready: true}}}}
	type member struct {
		c      *kubesvc.Controller
		reg    *prometheus.Registry
		cancel context.CancelFunc
		done   chan struct{}
		mu     sync.Mutex
		down   bool
	}
	start := func(name, ep string) *member {
		m := &member{reg: prometheus.NewRegistry(), done: make(chan struct{})}
		c, err := kubesvc.New(kubesvc.Config{Client: restricted, Source: src, Member: name, Endpoint: netip.MustParseAddrPort(ep),
			TTL: kubesvc.MinTTL, Registry: m.reg, Logger: zaptest.NewLogger(t).Named(name),
			Probe: func(context.Context, netip.AddrPort) error {
				m.mu.Lock()
				defer m.mu.Unlock()
				if m.down {
					return context.DeadlineExceeded
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		m.c = c
		var cctx context.Context
		cctx, m.cancel = context.WithCancel(ctx)
		go func() { defer close(m.done); c.Run(cctx) }()
		t.Cleanup(func() { m.cancel(); <-m.done })
		return m
	}
	published := func(what string, wantPort int32, want ...string) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			e, err1 := admin.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			s, err2 := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err1 != nil || err2 != nil || len(e.Subsets) != 1 || len(e.Subsets[0].Ports) != 1 || len(s.Ports) != 1 {
				return false, nil
			}
			var eips, sips []string
			for _, a := range e.Subsets[0].Addresses {
				eips = append(eips, a.IP)
			}
			for _, ep := range s.Endpoints {
				sips = append(sips, ep.Addresses...)
			}
			last = formatSet(eips, e.Subsets[0].Ports[0].Port) + " / " + formatSet(sips, *s.Ports[0].Port)
			return slices.Equal(eips, want) && slices.Equal(sips, want) && e.Subsets[0].Ports[0].Port == wantPort && *s.Ports[0].Port == wantPort, nil
		})
		if err != nil {
			t.Fatalf("%s: the kubernetes endpoints are %s, want %v port %d", what, last, want, wantPort)
		}
	}

	began := time.Now()
	cp1 := start("cp1", "192.0.2.10:16443")
	published("one member", 16443, "192.0.2.10")
	cp2 := start("cp2", "192.0.2.11:16443")
	published("two members", 16443, "192.0.2.10", "192.0.2.11")
	t.Logf("took over and added a member in %v", time.Since(began).Round(time.Millisecond))

	// Agreed: over two renewals (and the reconciles they trigger) neither member writes again, so
	// the stored objects are exactly what they compute.
	writes := func() float64 {
		return counter(t, cp1.reg, "skewgate_kubesvc_writes_total", map[string]string{"result": "updated"}) +
			counter(t, cp2.reg, "skewgate_kubesvc_writes_total", map[string]string{"result": "updated"})
	}
	// The last update's own reconcile: wait until the counters stop moving for a second.
	var last float64
	lastChange := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if w := writes(); w != last {
			last, lastChange = w, time.Now()
		}
		return time.Since(lastChange) >= time.Second, nil
	}); err != nil {
		t.Fatal("the members kept writing after agreeing")
	}
	before := writes()
	time.Sleep(2 * kubesvc.MinTTL / 3 * 2)
	if after := writes(); after != before {
		t.Errorf("members wrote %v more times after agreeing: the apiserver stores something else than they compute", after-before)
	}

	// cp2's front stops answering: it stops renewing and leaves within its TTL.
	cp2.mu.Lock()
	cp2.down = true
	cp2.mu.Unlock()
	down := time.Now()
	published("cp2's front down", 16443, "192.0.2.10")
	left := time.Since(down)
	t.Logf("a member whose front stopped answering left after %v (TTL %v, renewals every %v)", left.Round(time.Millisecond), kubesvc.MinTTL, kubesvc.MinTTL/3)
	if left > kubesvc.MinTTL+kubesvc.MinTTL/3+2*time.Second {
		t.Errorf("left after %v, more than TTL plus one renewal period", left)
	}

	// A rival (an apiserver still on the lease reconciler) writes the apiservers back: counted, not
	// fought at once.
	re, rs := asLeft("192.0.2.10", "192.0.2.11")
	cur, _ := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	rs.ResourceVersion = cur.ResourceVersion
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, rs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	curE, _ := admin.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	re.ResourceVersion = curE.ResourceVersion
	if _, err := admin.CoreV1().Endpoints("default").Update(ctx, re, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rivalAt := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return counter(t, cp1.reg, "skewgate_kubesvc_rival_writes_total", nil) >= 1, nil
	})
	if err != nil {
		t.Fatal("the rival write was not counted")
	}
	published("after the rival's backoff", 16443, "192.0.2.10")
	if took := time.Since(rivalAt); took < 4*time.Second {
		t.Errorf("took the endpoints back after %v, before the 5s backoff", took)
	}

	// cp2 (not in the set, its front down) stops; then the last member stops: it deletes its Lease
	// and hands the endpoints back to the apiservers. cp2 goes first: still running, in fallback it
	// would write the apiservers itself.
	cp2.cancel()
	<-cp2.done
	published("after cp2 stopped", 16443, "192.0.2.10")
	cp1.cancel()
	<-cp1.done
	if _, err := admin.CoordinationV1().Leases(kubesvc.Namespace).Get(ctx, "cp1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cp1's Lease after shutdown: %v, want it deleted", err)
	}
	published("after the last member stopped", 6443, "192.0.2.10", "192.0.2.11")
}

func formatSet(ips []string, port int32) string {
	return strings.Join(ips, ",") + " port " + strconv.Itoa(int(port))
}

// applyRBAC applies what `skewgate kubeadm rbac --kubernetes-endpoints` prints, as an admin would.
func applyRBAC(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	y, err := kubeadm.RBACYAMLFor(true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, doc := range bytes.Split(y, []byte("\n---\n")) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = admin.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("the RBAC renders a %T", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkLeastPrivilege: the rendered RBAC lets skewgate write only the two objects and member Leases.
func checkLeastPrivilege(t *testing.T, admin, restricted kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	other := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"}}
	if _, err := admin.CoreV1().Endpoints("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"update another Endpoints": func() error {
			_, err := restricted.CoreV1().Endpoints("default").Update(ctx, other, metav1.UpdateOptions{})
			return err
		}(),
		"create an Endpoints": func() error {
			_, err := restricted.CoreV1().Endpoints("default").Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}}, metav1.CreateOptions{})
			return err
		}(),
		"delete the kubernetes EndpointSlice": restricted.DiscoveryV1().EndpointSlices("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}),
		"patch the kubernetes Endpoints": func() error {
			_, err := restricted.CoreV1().Endpoints("default").Patch(ctx, "kubernetes", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}(),
		"list every Endpoints": func() error {
			_, err := restricted.CoreV1().Endpoints("default").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"write a Lease in kube-system": func() error {
			_, err := restricted.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
}
