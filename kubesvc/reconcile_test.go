package kubesvc

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/discovery"
)

// Two control-plane nodes: apiservers at .1 and .2:6443, fronts on the same IPs at :16443.
var cp = []string{"192.0.2.1:6443", "192.0.2.2:6443"}

func twoApiservers() *fakeSource { return newSource(ready("cp1", cp[0]), ready("cp2", cp[1])) }

func TestLiveMembersArePublishedSortedAndMarked(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	now := h.clock.Now()
	h.memberLease("cp2", "192.0.2.2:16443", now)
	h.memberLease("cp1", "192.0.2.1:16443", now)
	next := h.reconcile()
	ips, port := h.published()
	if !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 16443 {
		t.Fatalf("published %v port %d, want both fronts on 16443", ips, port)
	}
	if next != 15*time.Second {
		t.Errorf("next look %v, want the expiry in 15s", next)
	}
	s, _ := clientStore{h.client}.slice()
	e, _ := clientStore{h.client}.endpoints()
	if !markedSlice(s) || s.Labels[discoveryv1.LabelServiceName] != ServiceName || e.Labels[discoveryv1.LabelSkipMirror] != "true" || e.Labels[EndpointsManagedByLabel] != ManagedByValue {
		t.Errorf("labels: slice %v, endpoints %v", s.Labels, e.Labels)
	}
	if *s.Ports[0].Name != "https" || *s.Endpoints[0].Conditions.Ready != true || s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("slice %+v", s)
	}
	if g := testutil.ToFloat64(h.c.m.liveMembers); g != 2 {
		t.Errorf("live members gauge %v", g)
	}
	if g := testutil.ToFloat64(h.c.m.fallback); g != 0 {
		t.Errorf("fallback gauge %v", g)
	}
}

// TestNoWriteWhenEqual: a second member computing the same set writes nothing, so members never
// fight.
func TestNoWriteWhenEqual(t *testing.T) {
	src := twoApiservers()
	objs := asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")
	h := newHarness(t, "cp1", "192.0.2.1:16443", src, objs...)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now())
	h.writes()
	h.reconcile()
	if w := h.writes(); !slices.Equal(w, []string{"update endpointslices/kubernetes", "update endpoints/kubernetes"}) {
		t.Fatalf("first reconcile wrote %v", w)
	}
	h.reconcile()
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("second reconcile wrote %v", w)
	}
	// cp2's own controller, on the same objects, agrees and writes nothing either.
	h2 := &harness{t: t, client: h.client, clock: h.clock}
	c2, err := New(Config{Client: h.client, Source: src, Member: "cp2", Endpoint: h.c.cfg.Endpoint, Clock: h.clock, Registry: nil})
	if err != nil {
		t.Fatal(err)
	}
	c2.store, h2.c = clientStore{h.client}, c2
	c2.synced.Store(true)
	h2.reconcile()
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("the other member wrote %v", w)
	}
}

// TestFallbackAndNeverEmpty: with no live front the ready apiservers' own addresses are published;
// with none of those either, nothing is written.
func TestFallbackAndNeverEmpty(t *testing.T) {
	src := newSource(ready("cp1", "192.0.2.1:6443"), ready("cp2", "192.0.2.2:6443"), notReady("cp3", "192.0.2.3:6443"),
		ready("local", "127.0.0.1:6443"), ready("dns", "cp4.example:6443"))
	h := newHarness(t, "cp1", "192.0.2.1:16443", src, asLeftByApiservers(16443, "192.0.2.9")...)
	h.reconcile()
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 6443 {
		t.Fatalf("fallback published %v port %d", ips, port)
	}
	if g := testutil.ToFloat64(h.c.m.fallback); g != 1 {
		t.Errorf("fallback gauge %v", g)
	}
	src.set(notReady("cp1", "192.0.2.1:6443"), ready("local", "127.0.0.1:6443"))
	h.writes()
	h.reconcile()
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("with nothing to publish it wrote %v", w)
	}
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) {
		t.Fatalf("left %v", ips)
	}
}

// TestFallbackPortMajority: one subset carries one port: the most common one wins.
func TestFallbackPortMajority(t *testing.T) {
	ips, port := fallbackSet(newSource(ready("a", "192.0.2.3:443"), ready("b", "192.0.2.1:6443"), ready("c", "192.0.2.2:6443")).t)
	if !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 6443 {
		t.Fatalf("%v %d", ips, port)
	}
}

// TestExpiryOnTheLocalClock: a member is live while its renewTime changes, whatever that
// renewTime says: a node whose clock is an hour off stays in, a silent one leaves after its TTL.
func TestExpiryOnTheLocalClock(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	skewed := h.clock.Now().Add(-time.Hour)
	h.memberLease("cp2", "192.0.2.2:16443", skewed)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now().Add(time.Hour))
	h.reconcile()
	for i := range 4 { // renewed every 5s by their own (skewed) clocks: live throughout
		h.clock.Step(5 * time.Second)
		h.memberLease("cp2", "192.0.2.2:16443", skewed.Add(time.Duration(i+1)*5*time.Second))
		h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now().Add(time.Hour))
		h.reconcile()
		if ips, _ := h.published(); len(ips) != 2 {
			t.Fatalf("step %d: %v, want both", i, ips)
		}
	}
	// cp2 stops renewing: still in for just under 15s, gone at 15s.
	h.clock.Step(5 * time.Second)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now().Add(time.Hour))
	if next := h.reconcile(); next != 10*time.Second {
		t.Fatalf("next look %v, want cp2's expiry in 10s", next)
	}
	h.clock.Step(10*time.Second - time.Millisecond)
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 2 {
		t.Fatalf("before the TTL: %v", ips)
	}
	h.clock.Step(time.Millisecond)
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("after cp2's TTL: %v, want cp1 only", ips)
	}
	// A renewal brings it back.
	h.memberLease("cp2", "192.0.2.2:16443", skewed.Add(time.Minute))
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 2 {
		t.Fatalf("after cp2 renewed: %v", ips)
	}
}

// TestBadLeasesIgnoredCountedOnce: a bad member Lease is logged and counted once per content, and
// never published; past the cap, members are ignored too.
func TestBadLeasesIgnoredCountedOnce(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	now := h.clock.Now()
	h.memberLease("cp1", "192.0.2.1:16443", now)
	h.memberLease("evil", "198.51.100.7:16443", now)
	for range 3 {
		h.reconcile()
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadNotAnApiserver)); n != 1 {
		t.Errorf("not_an_apiserver counted %v times, want once", n)
	}
	h.memberLease("evil", "127.0.0.1:16443", now.Add(time.Second))
	h.reconcile()
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadAddress)); n != 1 {
		t.Errorf("address counted %v times after the change, want once", n)
	}
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("published %v", ips)
	}
	if len(h.c.badLogged) != 1 {
		t.Errorf("remembered %d bad Leases", len(h.c.badLogged))
	}
	if err := h.client.CoordinationV1().Leases(Namespace).Delete(context.Background(), "evil", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if len(h.c.badLogged) != 0 {
		t.Errorf("a deleted bad Lease is still remembered")
	}
}

// TestDeadLeasesCannotFillTheCap: the cap counts live members only, so Leases nobody renews (a
// Lease writer filling the cap) cannot keep real members out; past the cap, live ones are ignored.
func TestDeadLeasesCannotFillTheCap(t *testing.T) {
	var ups []discovery.Upstream
	for i := range 6 {
		ups = append(ups, ready("cp"+strconv.Itoa(i+1), "192.0.2."+strconv.Itoa(i+1)+":6443"))
	}
	h := newHarness(t, "cp5", "192.0.2.5:16443", newSource(ups...), asLeftByApiservers(6443, "192.0.2.1")...)
	stale := h.clock.Now().Add(-time.Hour)
	for i := range 4 { // the harness caps at 4: cp1..cp4 written once, an hour ago, never renewed
		h.memberLease("cp"+strconv.Itoa(i+1), "192.0.2."+strconv.Itoa(i+1)+":16443", stale)
	}
	h.memberLease("cp5", "192.0.2.5:16443", h.clock.Now())
	h.memberLease("cp6", "192.0.2.6:16443", h.clock.Now())
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.5", "192.0.2.6"}) {
		t.Fatalf("published %v, want the two live members", ips)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadMaxMembers)); n != 0 {
		t.Errorf("max_members counted %v with 2 live members", n)
	}
	for i := range 4 { // now they all renew: 6 live, the first 4 by name count
		h.memberLease("cp"+strconv.Itoa(i+1), "192.0.2."+strconv.Itoa(i+1)+":16443", h.clock.Now())
	}
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 4 {
		t.Fatalf("published %v, want 4", ips)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadMaxMembers)); n != 2 {
		t.Errorf("max_members counted %v, want 2", n)
	}
}

// TestForgedMemberLeases: a member Lease must be named for an apiserver discovery knows and carry
// that apiserver's address, or one in a --kubernetes-endpoints-cidr: a Lease writer cannot publish
// an address of its own, nor another apiserver's under a made-up name.
func TestForgedMemberLeases(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h.c.cfg.EndpointCIDRs = cidrs("198.51.100.0/24")
	now := h.clock.Now()
	h.memberLease("cp1", "192.0.2.1:16443", now)
	h.memberLease("kube-evil", "198.51.100.7:16443", now) // inside the CIDR, but no apiserver's name
	h.memberLease("evil2", "192.0.2.2:16443", now)        // an apiserver's address, another name
	h.memberLease("cp2", "192.0.2.1:16443", now)          // cp1's address under cp2's name
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("published %v, want cp1 only", ips)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadNotAnApiserver)); n != 2 {
		t.Errorf("not_an_apiserver counted %v, want 2", n)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadNotAllowed)); n != 1 {
		t.Errorf("not_allowed counted %v, want 1", n)
	}
	// cp2's front on another address, admitted by --kubernetes-endpoints-cidr.
	h.memberLease("cp2", "198.51.100.2:16443", now.Add(time.Second))
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "198.51.100.2"}) {
		t.Fatalf("published %v, want cp1 and cp2's front", ips)
	}
}

// TestFirstSeenLeases: a Lease read for the first time (after a restart) is live only if its
// renewTime is within its duration of this clock, and a Lease never renewed stays live for at most
// this process's TTL, whatever leaseDurationSeconds it claims.
func TestFirstSeenLeases(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.9")...)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now().Add(-20*time.Second)) // TTL 15s: stale
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("published %v, want cp1 only (cp2's renewal is 20s old)", ips)
	}
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now().Add(-19*time.Second)) // changed: live
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 2 {
		t.Fatalf("published %v, want both once cp2 renewed", ips)
	}

	// A fresh Lease claiming 300s, never renewed: gone after this process's 15s.
	h2 := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.9")...)
	h2.memberLease("cp2", "192.0.2.2:16443", h2.clock.Now())
	l, err := h2.client.CoordinationV1().Leases(Namespace).Get(context.Background(), "cp2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(300))
	if _, err := h2.client.CoordinationV1().Leases(Namespace).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	renew := func() { h2.memberLease("cp1", "192.0.2.1:16443", h2.clock.Now()) }
	renew()
	if next := h2.reconcile(); next != 15*time.Second {
		t.Fatalf("next look %v, want cp2's expiry in 15s", next)
	}
	h2.clock.Step(15 * time.Second)
	renew()
	h2.reconcile()
	if ips, _ := h2.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("published %v after 15s, want cp1 only", ips)
	}
}

func TestMissingObjectsNotCreated(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers())
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.writes()
	h.reconcile()
	h.reconcile()
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote %v", w)
	}
	for _, obj := range []string{objEndpoints, objEndpointSlice} {
		if n := testutil.ToFloat64(h.c.m.writes.WithLabelValues(obj, writeMissing)); n != 2 {
			t.Errorf("%s missing counted %v", obj, n)
		}
	}
}

// TestRivalBackoff: once skewgate wrote, an unmarked slice with other endpoints is a rival: not
// written back for 5s, then 10s after the next one, and counted once each.
func TestRivalBackoff(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	renew := func() { h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now()) }
	renew()
	h.reconcile() // the takeover: no rival
	if n := testutil.ToFloat64(h.c.m.rivals); n != 0 {
		t.Fatalf("the takeover counted as a rival")
	}
	rival := func(rv string) {
		for _, o := range asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2") {
			o.(metav1.Object).SetResourceVersion(rv)
			if err := h.client.Tracker().Update(gvrOf(o), o, ServiceNamespace); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, wait := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
		rival(strings.Repeat("r", i+1))
		h.writes()
		if next := h.reconcile(); next != min(wait, 15*time.Second) { // or cp1's own expiry, if sooner
			t.Fatalf("rival %d: next look %v, want %v", i, next, wait)
		}
		if w := h.writes(); len(w) != 0 {
			t.Fatalf("rival %d: wrote back at once: %v", i, w)
		}
		if n := testutil.ToFloat64(h.c.m.rivals); n != float64(i+1) {
			t.Fatalf("rivals counted %v, want %d", n, i+1)
		}
		h.clock.Step(wait - time.Millisecond)
		renew()
		h.writes()
		h.reconcile()
		if w := h.writes(); len(w) != 0 {
			t.Fatalf("rival %d: wrote before the backoff: %v", i, w)
		}
		h.clock.Step(time.Millisecond)
		renew()
		h.reconcile()
		if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) || port != 16443 {
			t.Fatalf("rival %d: not taken back after the backoff: %v %d", i, ips, port)
		}
	}
	// The rival writes what skewgate wants (the fallback set): its slice is left alone, unmarked.
	h2 := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h2.c.rival.seenOurs = true
	h2.writes()
	h2.reconcile()
	for _, w := range h2.writes() {
		if w == "update endpointslices/kubernetes" {
			t.Errorf("rewrote an unmarked slice with the wanted endpoints only to mark it")
		}
	}
}

// TestRivalBackoffStaysAtItsCap: a rival (an apiserver on the lease reconciler) that writes its set
// back 10s after each takeover keeps skewgate's backoff growing to 5m and there: the quiet period
// that resets it is measured from the end of the last backoff, not from the last rival write.
func TestRivalBackoffStaysAtItsCap(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	renew := func() { h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now()) }
	renew()
	h.reconcile() // the takeover
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i, wait := range want {
		h.clock.Step(10 * time.Second) // the rival's reconcile interval
		for _, o := range asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2") {
			o.(metav1.Object).SetResourceVersion("r" + strconv.Itoa(i))
			if err := h.client.Tracker().Update(gvrOf(o), o, ServiceNamespace); err != nil {
				t.Fatal(err)
			}
		}
		renew()
		h.reconcile()
		if h.c.rival.delay != wait {
			t.Fatalf("rival write %d: backoff %v, want %v", i, h.c.rival.delay, wait)
		}
		h.clock.Step(wait)
		renew()
		h.reconcile()
		if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) || port != 16443 {
			t.Fatalf("rival write %d: not taken back after the backoff: %v %d", i, ips, port)
		}
	}
}

// TestRivalEmptiedIsTakenBackAtOnce: the last apiserver on the lease reconciler empties the set when
// it stops; skewgate writes it back without waiting, and counts the rival write.
func TestRivalEmptiedIsTakenBackAtOnce(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.reconcile()
	for _, o := range asLeftByApiservers(6443) {
		o.(metav1.Object).SetResourceVersion("emptied")
		if err := h.client.Tracker().Update(gvrOf(o), o, ServiceNamespace); err != nil {
			t.Fatal(err)
		}
	}
	h.reconcile()
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) || port != 16443 {
		t.Fatalf("after an emptying rival: %v %d", ips, port)
	}
	if n := testutil.ToFloat64(h.c.m.rivals); n != 1 {
		t.Errorf("rivals %v", n)
	}
}
