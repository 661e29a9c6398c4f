package kubesvc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/discovery"
)

func TestMemberValidation(t *testing.T) {
	p := memberPolicy{port: 16443, apiservers: map[string]netip.Addr{"m": netip.MustParseAddr("10.0.0.1"), "cp2": netip.MustParseAddr("10.0.0.2")},
		cidrs: cidrs("192.0.2.0/24"), ttl: 15 * time.Second}
	for _, c := range []struct {
		annotation string
		want       string // "" valid
	}{
		{"10.0.0.1:16443", ""},
		{"192.0.2.77:16443", ""},
		{"10.0.0.2:16443", BadNotAllowed},
		{"10.0.0.1:6443", BadPort},
		{"127.0.0.1:16443", BadAddress},
		{"169.254.1.1:16443", BadAddress},
		{"0.0.0.0:16443", BadAddress},
		{"224.0.0.1:16443", BadAddress},
		{"255.255.255.255:16443", BadAddress},
		{"[2001:db8::1]:16443", BadMalformed},
		{"[::ffff:10.0.0.1]:16443", BadMalformed},
		{"10.0.0.1", BadMalformed},
		{"10.0.0.1:0", BadMalformed},
		{"10.0.0.1:99999", BadMalformed},
		{"cp1:16443", BadMalformed},
		{" 10.0.0.1:16443", BadMalformed},
		{strings.Repeat("1", 4096), BadMalformed},
		{"", BadMalformed},
	} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{EndpointAnnotation: c.annotation}}}
		ok, bad := p.validate([]*coordinationv1.Lease{l})
		got := bad["m"].reason
		if c.want == "" && (len(ok) != 1 || len(bad) != 0) || c.want != "" && (got != c.want || len(ok) != 0) {
			t.Errorf("%.40q: valid %v, rejected %q; want %q", c.annotation, ok, got, c.want)
		}
		if len(bad["m"].annotation) > maxAnnotationLen {
			t.Errorf("%.40q: kept %d bytes of it", c.annotation, len(bad["m"].annotation))
		}
	}
	// No annotation; a name that is no apiserver's, even on an apiserver's or an allowed address;
	// another apiserver's address; a Lease duration past this process's TTL is clamped to it.
	lease := func(name, ep string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{EndpointAnnotation: ep}}}
	}
	long := lease("m", "10.0.0.1:16443")
	long.Spec.LeaseDurationSeconds = ptr.To(int32(1 << 30))
	ok, bad := p.validate([]*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}}, long,
		lease("evil", "10.0.0.1:16443"), lease("evil2", "192.0.2.7:16443"), lease("cp2", "10.0.0.1:16443"),
	})
	if bad["none"].reason != BadMalformed || bad["evil"].reason != BadNotAnApiserver || bad["evil2"].reason != BadNotAnApiserver ||
		bad["cp2"].reason != BadNotAllowed || len(ok) != 1 || ok[0].duration != 15*time.Second {
		t.Errorf("valid %+v, rejected %+v", ok, bad)
	}
}

// FuzzParseEndpoint: whatever a Lease writer puts in the annotation, parsing neither panics nor
// accepts anything the apiserver would refuse or no front can be.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"10.0.0.1:16443", "127.0.0.1:1", "[::1]:1", "1.2.3.4:0", "x", "1.2.3.4:65536", "01.2.3.4:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, reason, err := parseEndpoint(s)
		if err != nil {
			if reason == "" {
				t.Fatalf("%q refused without a reason", s)
			}
			return
		}
		a := ap.Addr()
		if !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() || ap.Port() == 0 || len(s) > maxAnnotationLen {
			t.Fatalf("%q accepted as %s", s, ap)
		}
		if ap.String() != s {
			t.Fatalf("%q accepted as %s: not its canonical form", s, ap)
		}
	})
}

// TestHeartbeatRenewsOnlyWhileLive: no ready apiserver, or a front that does not answer, leaves the
// Lease alone; live, it is created and then renewed.
func TestHeartbeatRenewsOnlyWhileLive(t *testing.T) {
	src := newSource(notReady("cp1", cp[0]))
	h := newHarness(t, "cp1", "192.0.2.1:16443", src)
	ctx := context.Background()
	leases := h.client.CoordinationV1().Leases(Namespace)
	h.c.heartbeat(ctx)
	src.set(ready("cp1", cp[0]))
	h.probe = errFront
	h.c.heartbeat(ctx)
	if l, _ := leases.List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("renewed while not live: %+v", l.Items)
	}
	h.probe = nil
	h.c.heartbeat(ctx)
	first, err := leases.Get(ctx, "cp1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Labels[MemberLabel] != "true" || first.Annotations[EndpointAnnotation] != "192.0.2.1:16443" || *first.Spec.LeaseDurationSeconds != 15 || *first.Spec.HolderIdentity != "cp1" {
		t.Fatalf("Lease %+v", first)
	}
	h.clock.Step(5 * time.Second)
	h.c.heartbeat(ctx)
	second, _ := leases.Get(ctx, "cp1", metav1.GetOptions{})
	if !second.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
		t.Errorf("renewTime %v, then %v", first.Spec.RenewTime, second.Spec.RenewTime)
	}
	for result, want := range map[string]float64{beatNotReady: 1, beatProbeFailed: 1, beatRenewed: 2, beatError: 0} {
		if n := testutil.ToFloat64(h.c.m.heartbeats.WithLabelValues(result)); n != want {
			t.Errorf("heartbeats{%s} = %v, want %v", result, n, want)
		}
	}
}

var errFront = &net.OpError{Op: "dial", Err: net.UnknownNetworkError("test: front down")}

// TestTLSProbe: the handshake verifies the front's certificate for kubernetes.default.svc.
func TestTLSProbe(t *testing.T) {
	good, goodKey, err := cert.GenerateSelfSignedCertKey("kube-apiserver", nil, []string{"kubernetes.default.svc"})
	if err != nil {
		t.Fatal(err)
	}
	other, otherKey, err := cert.GenerateSelfSignedCertKey("other", nil, []string{"other.example"})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(c, k []byte) netip.AddrPort {
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				go func() { conn.(*tls.Conn).Handshake(); conn.Close() }()
			}
		}()
		return netip.MustParseAddrPort(l.Addr().String())
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(good)
	pool.AppendCertsFromPEM(other)
	probe := TLSProbe(&tls.Config{RootCAs: pool}, time.Second)
	if err := probe(context.Background(), serve(good, goodKey)); err != nil {
		t.Errorf("the apiserver certificate: %v", err)
	}
	if err := probe(context.Background(), serve(other, otherKey)); err == nil {
		t.Error("a certificate not for kubernetes.default.svc was accepted")
	}
	onlyOther := x509.NewCertPool()
	onlyOther.AppendCertsFromPEM(other)
	if err := TLSProbe(&tls.Config{RootCAs: onlyOther}, time.Second)(context.Background(), serve(good, goodKey)); err == nil {
		t.Error("a certificate from another CA was accepted")
	}
}

// TestMemberLeaseCacheIsSlim: the member Lease informer keeps only what a reconcile reads, so a
// Lease writer's annotations, labels, managedFields and a long holderIdentity do not stay in
// memory; an endpoint annotation longer than any endpoint is dropped.
func TestMemberLeaseCacheIsSlim(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	lease := func(name, endpoint string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, ResourceVersion: "7",
				Labels:        map[string]string{MemberLabel: "true", "other": big[:63]},
				Annotations:   map[string]string{EndpointAnnotation: endpoint, "other": big},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: big[:1000]}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(big), LeaseDurationSeconds: ptr.To(int32(15)),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Unix(1_800_000_000, 0)))},
		}
	}
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), lease("cp1", "192.0.2.1:16443"), lease("cp2", big))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced, err := h.c.startInformers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync")
	}
	leases := h.c.store.leases()
	if len(leases) != 2 {
		t.Fatalf("cached %d Leases", len(leases))
	}
	for _, l := range leases {
		size := len(l.Spec.String()) + len(l.ObjectMeta.String())
		if size > 1024 || len(l.Labels) != 1 || len(l.ManagedFields) != 0 || len(*l.Spec.HolderIdentity) > maxHolderLen {
			t.Errorf("cached Lease %s: %d bytes, labels %d, managedFields %d, holder %d bytes", l.Name, size, len(l.Labels), len(l.ManagedFields), len(*l.Spec.HolderIdentity))
		}
		if l.ResourceVersion != "7" || l.Spec.RenewTime == nil || *l.Spec.LeaseDurationSeconds != 15 {
			t.Errorf("cached Lease %s lost what a reconcile reads: %+v", l.Name, l)
		}
		switch l.Name {
		case "cp1":
			if l.Annotations[EndpointAnnotation] != "192.0.2.1:16443" || len(l.Annotations) != 1 {
				t.Errorf("cp1's annotations %v", l.Annotations)
			}
		case "cp2":
			if len(l.Annotations) != 0 {
				t.Errorf("cp2's long endpoint annotation kept (%d annotations)", len(l.Annotations))
			}
		}
	}
}

// TestApiserverNames: member names are Lease names (lowercase), so apiserver names are matched
// lowercased; two apiservers whose names differ only in case admit no address of their own.
func TestApiserverNames(t *testing.T) {
	got := apiserverAddrs(&discovery.Topology{
		Upstreams: []discovery.Upstream{ready("CP1", "192.0.2.1:6443"), ready("cp2", "192.0.2.2:6443"), ready("CP2", "192.0.2.3:6443")},
		Unproven:  []discovery.Upstream{notReady("cp3", "cp3.example:6443")},
		// A v1.35 apiserver's identity Lease names no address: known by name only; an ignored Lease
		// never takes the address of an upstream of the same name.
		Ignored: []discovery.IgnoredLease{{Lease: "kube-apiserver-x", Hostname: "CP4", Reason: discovery.IgnoredNoAddress}, {Lease: "kube-apiserver-y", Hostname: "cp1", Reason: discovery.IgnoredNoAddress}, {Lease: "kube-apiserver-z", Reason: discovery.IgnoredNoAddress},
			{Lease: "kube-apiserver-w", Hostname: "cp5", Reason: discovery.IgnoredContested}, {Lease: "kube-apiserver-v", Hostname: "cp6", Reason: discovery.IgnoredMaxUpstreams}},
	})
	want := map[string]netip.Addr{"cp1": netip.MustParseAddr("192.0.2.1"), "cp2": {}, "cp3": {}, "cp4": {}}
	if !maps.Equal(got, want) {
		t.Errorf("apiserver addresses %v, want %v", got, want)
	}
}
