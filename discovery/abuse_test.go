package discovery

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// poll waits for cond, failing the test with what after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestRejectionsStayBoundedUnderAnnotationChurn: a Lease writer who rewrites one Lease with ever
// new 200 KiB annotations leaves no trace of them; a deleted Lease is forgotten (its address counts
// again when it comes back). Keyed by the whole annotation and never pruned, 300 updates kept 60 MiB.
func TestRejectionsStayBoundedUnderAnnotationChurn(t *testing.T) {
	pki, _ := testPKI(t)
	big := func(i int) string { return strconv.Itoa(i) + strings.Repeat("x", 200<<10) }
	client := fake.NewClientset(lease("apiserver-big", "big", big(0), time.Now()))
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), Registry: prometheus.NewRegistry(), InitialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runController(t, c)
	counted := func() float64 { return testutil.ToFloat64(c.metrics.rejectedLeases.WithLabelValues(RejectMalformed)) }
	poll(t, 20*time.Second, "the first rejection", func() bool { return counted() == 1 })

	before := heapAlloc()
	const updates = 300
	for i := 1; i <= updates; i++ {
		l := lease("apiserver-big", "big", big(i), time.Now())
		if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		client.ClearActions() // the fake clientset records every call, objects included
		poll(t, 10*time.Second, "rejection "+strconv.Itoa(i), func() bool { return counted() == float64(i+1) })
	}
	if grown := heapAlloc() - before; grown > 16<<20 {
		t.Errorf("%d rejected 200 KiB annotations of one Lease grew the heap by %d MiB", updates, grown>>20)
	}

	if err := client.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, "apiserver-big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the deleted Lease to be no longer ignored", func() bool {
		return testutil.ToFloat64(c.metrics.ignoredLeases.WithLabelValues(RejectMalformed)) == 0
	})
	if _, err := client.CoordinationV1().Leases(LeaseNamespace).Create(ctx, lease("apiserver-big", "big", big(updates), time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the re-created Lease's address counted again", func() bool { return counted() == updates+2 })
}

// TestEndpointSliceTrustIsTheKubernetesSliceOnly: a slice labelled for the kubernetes Service but
// not named kubernetes vouches for nothing.
func TestEndpointSliceTrustIsTheKubernetesSliceOnly(t *testing.T) {
	pki, _ := testPKI(t)
	now := time.Now()
	genuine := kubernetesSlice("127.0.0.1:1")
	forged := kubernetesSlice("127.0.0.2:1")
	forged.Name = "kubernetes-x7k2p"
	client := fake.NewClientset(
		lease("apiserver-a", "a", "127.0.0.1:1", now),
		lease("apiserver-b", "b", "127.0.0.2:1", now),
		genuine, forged,
	)
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), TrustEndpointSlice: true, Registry: prometheus.NewRegistry(),
		InitialTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	poll(t, 20*time.Second, "b's address refused", func() bool {
		return testutil.ToFloat64(c.metrics.rejectedLeases.WithLabelValues(RejectNotAllowed)) == 1
	})
	topo := waitFor(t, c, "a as an upstream", func(tp *Topology) bool { _, ok := tp.Upstream("a"); return ok })
	if _, ok := topo.Upstream("b"); ok {
		t.Error("an address vouched for by a forged EndpointSlice became an upstream")
	}
}

// TestContestedHostnameIsDeterministic: whatever order the lister returns two Leases claiming one
// hostname in, the Lease named the way the apiserver names its own wins; with none so named the
// hostname is refused while contested.
func TestContestedHostnameIsDeterministic(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	fresh := now.Add(-time.Second)
	policy := AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}
	genuine := lease(identityLeaseName("cp1"), "cp1", "10.0.0.1:6443", fresh)
	leases := []*coordinationv1.Lease{
		genuine,
		lease("apiserver-forged1", "cp1", "10.0.0.66:6443", fresh),
		lease("apiserver-forged2", "cp1", "10.0.0.67:6443", fresh),
		lease("apiserver-x", "cp2", "10.0.0.2:6443", fresh),
		lease("apiserver-y", "cp2", "10.0.0.3:6443", fresh),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(leases), func(i, j int) { leases[i], leases[j] = leases[j], leases[i] })
		v := readLeases(leases, nil, policy, nil, now, 30*time.Second, nil)
		if len(v.candidates) != 1 || v.candidates[0].Name != "cp1" || v.candidates[0].Address != "10.0.0.1:6443" || v.candidates[0].LeaseName != genuine.Name {
			t.Fatalf("candidates %+v, want cp1 at 10.0.0.1:6443 from %s only", v.candidates, genuine.Name)
		}
		var contested []string
		for _, l := range v.ignored {
			if l.Reason == IgnoredContested {
				contested = append(contested, l.Lease)
			}
		}
		if want := []string{"apiserver-forged1", "apiserver-forged2", "apiserver-x", "apiserver-y"}; !slices.Equal(contested, want) {
			t.Fatalf("contested %v, want %v", contested, want)
		}
	}
}

// TestIdentityLeaseName pins the apiserver's naming (k8s.io/apiserver pkg/server/config.go) on a
// value computed independently: SHA-256 of the bytes 00 04 "cp-1" 00 0e "kube-apiserver", first 16
// bytes, base32, lowercase, unpadded.
func TestIdentityLeaseName(t *testing.T) {
	if got, want := identityLeaseName("cp-1"), "apiserver-rplpdvtx3lntmi4xy2xnxookk4"; got != want {
		t.Errorf("identityLeaseName(cp-1) = %q, want %q", got, want)
	}
}

// TestMaxUpstreams: past the cap new Leases are refused; static upstreams and the upstreams already
// running keep their place, then the oldest Leases.
func TestMaxUpstreams(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	policy := AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}
	var leases []*coordinationv1.Lease
	for i := range 6 {
		l := lease("apiserver-l"+strconv.Itoa(i), "l"+strconv.Itoa(i), "10.0.0."+strconv.Itoa(i+1)+":6443", now)
		l.CreationTimestamp = metav1.NewTime(now.Add(-time.Duration(i) * time.Minute)) // l5 is the oldest
		leases = append(leases, l)
	}
	v := readLeases(leases, []StaticUpstream{{Name: "static", Address: "10.9.0.1:6443"}}, policy, nil, now, 30*time.Second, nil)
	v.limit(4, map[string]bool{"l0": true})
	var got []string
	for _, c := range v.candidates {
		got = append(got, c.Name)
	}
	if want := []string{"l0", "l4", "l5", "static"}; !slices.Equal(got, want) {
		t.Errorf("candidates %v, want %v (static, the running l0, then the oldest)", got, want)
	}
	var refused []string
	for _, l := range v.ignored {
		if l.Reason == IgnoredMaxUpstreams {
			refused = append(refused, l.Lease)
		}
	}
	if want := []string{"apiserver-l1", "apiserver-l2", "apiserver-l3"}; !slices.Equal(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}
}

// TestMaxUpstreamsInController: a flood of Leases over the cap is refused, counted in a gauge and
// logged once however often the Leases are renewed.
func TestMaxUpstreamsInController(t *testing.T) {
	pki, _ := testPKI(t)
	var objs []*coordinationv1.Lease
	for i := range 5 {
		objs = append(objs, lease("apiserver-f"+strconv.Itoa(i), "f"+strconv.Itoa(i), "127.0.0."+strconv.Itoa(i+1)+":1", time.Now()))
	}
	client := fake.NewClientset()
	for _, l := range objs {
		client.Tracker().Add(l)
	}
	core, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), Policy: AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		MaxUpstreams: 2, Registry: reg, Logger: zap.New(core), InitialTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runController(t, c)
	refused := func() float64 {
		return testutil.ToFloat64(c.metrics.ignoredLeases.WithLabelValues(IgnoredMaxUpstreams))
	}
	poll(t, 20*time.Second, "3 Leases refused", func() bool { return refused() == 3 })
	topo := waitFor(t, c, "two upstreams", func(tp *Topology) bool { return len(tp.Upstreams)+len(tp.Unproven) == 2 })
	if len(topo.Ignored) != 3 {
		t.Errorf("ignored %+v, want the 3 refused Leases", topo.Ignored)
	}
	var last time.Time
	for round := range 3 {
		for _, l := range objs {
			last = time.Now()
			l.Spec.RenewTime = &metav1.MicroTime{Time: last}
			l.ResourceVersion = ""
			if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(round, err)
			}
		}
	}
	// A sync that reads every renewal: nothing should be logged for them.
	poll(t, 10*time.Second, "the informer to see the last renewal", func() bool {
		for _, l := range c.leases() {
			if l.Name == objs[len(objs)-1].Name {
				return l.Spec.RenewTime.Time.Equal(last)
			}
		}
		return false
	})
	before := syncs(t, reg)
	c.requestSync()
	poll(t, 10*time.Second, "a sync after the renewals", func() bool { return syncs(t, reg) > before })
	if got := logs.FilterField(zap.String("reason", IgnoredMaxUpstreams)).Len(); got != 1 {
		t.Errorf("%d log lines about refused Leases, want 1 (one for the 3 Leases refused at once)", got)
	}
	if refused() != 3 {
		t.Errorf("refused gauge %v after renewals, want 3", refused())
	}
}

// TestLeaseWithoutAddressIsVisible: a v1.35 Lease without the annotation and without a static
// upstream is listed with a hint and counted.
func TestLeaseWithoutAddressIsVisible(t *testing.T) {
	pki, _ := testPKI(t)
	client := fake.NewClientset(lease("apiserver-old", "cp-old", "", time.Now()))
	reg := prometheus.NewRegistry()
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), Registry: reg, InitialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	topo := waitFor(t, c, "the Lease listed", func(tp *Topology) bool { return len(tp.Ignored) == 1 })
	l := topo.Ignored[0]
	if l.Lease != "apiserver-old" || l.Hostname != "cp-old" || l.Reason != IgnoredNoAddress || !strings.Contains(l.Hint, "--static-upstream=cp-old=") {
		t.Errorf("ignored %+v", l)
	}
	want := `
# HELP skewgate_discovery_ignored_leases Live identity Leases that are no upstream, by reason (no_address: add a --static-upstream for the hostname; contested_hostname; max_upstreams; malformed, not_allowed: refused by the address policy).
# TYPE skewgate_discovery_ignored_leases gauge
skewgate_discovery_ignored_leases{reason="contested_hostname"} 0
skewgate_discovery_ignored_leases{reason="malformed"} 0
skewgate_discovery_ignored_leases{reason="max_upstreams"} 0
skewgate_discovery_ignored_leases{reason="no_address"} 1
skewgate_discovery_ignored_leases{reason="not_allowed"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skewgate_discovery_ignored_leases"); err != nil {
		t.Error(err)
	}
}

// TestEndpointSliceTrustSkipsSkewgatesOwnSlice: the kubernetes slice skewgate writes itself
// (`serve --kubernetes-endpoints`, marked managed-by SkewgateManagedBy) vouches for nothing, or a
// member Lease writer could get any address trusted by having it published.
func TestEndpointSliceTrustSkipsSkewgatesOwnSlice(t *testing.T) {
	pki, _ := testPKI(t)
	now := time.Now()
	own := kubernetesSlice("127.0.0.2:1")
	own.Labels[discoveryv1.LabelManagedBy] = SkewgateManagedBy
	client := fake.NewClientset(
		lease("apiserver-a", "a", "127.0.0.1:1", now),
		lease("apiserver-b", "b", "127.0.0.2:1", now),
		own,
	)
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), TrustEndpointSlice: true, Registry: prometheus.NewRegistry(),
		Static: []StaticUpstream{{Name: "a", Address: "127.0.0.1:1"}}, InitialTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	poll(t, 20*time.Second, "b's address refused", func() bool {
		return testutil.ToFloat64(c.metrics.rejectedLeases.WithLabelValues(RejectNotAllowed)) == 1
	})
	// The same slice without the mark (the apiservers' own) vouches for b.
	delete(own.Labels, discoveryv1.LabelManagedBy)
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), own, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "b as an upstream once the apiservers wrote the slice", func(tp *Topology) bool { _, ok := tp.Upstream("b"); return ok })
}
