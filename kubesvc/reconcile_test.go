package kubesvc

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadNotAllowed)); n != 1 {
		t.Errorf("not_allowed counted %v times, want once", n)
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

func TestMemberCap(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1")...)
	h.c.cfg.AllowedCIDRs = cidrs("192.0.2.0/24")
	for i := range 6 { // the harness caps at 4
		h.memberLease("m"+string(rune('a'+i)), "192.0.2."+string(rune('1'+i))+":16443", h.clock.Now())
	}
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 4 {
		t.Fatalf("published %v, want the first 4 by Lease name", ips)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadMaxMembers)); n != 2 {
		t.Errorf("max_members counted %v", n)
	}
}

// TestMissingObjectsNotCreated: skewgate has no create verb; a missing object is counted.
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

// TestShutdownRemovesItselfFirst: the Lease goes first, then the set without this member.
func TestShutdownRemovesItselfFirst(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now())
	h.reconcile()
	h.writes()
	h.c.Shutdown()
	if w := h.writes(); !slices.Equal(w, []string{"delete leases/cp1", "update endpointslices/kubernetes", "update endpoints/kubernetes"}) {
		t.Fatalf("shutdown wrote %v", w)
	}
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.2"}) || port != 16443 {
		t.Fatalf("after shutdown %v %d, want cp2's front", ips, port)
	}
	// The last member leaving hands the Service back to the apiservers.
	h2 := newHarness(t, "cp2", "192.0.2.2:16443", twoApiservers())
	h2.client = h.client
	h2.c.cfg.Client, h2.c.store = h.client, clientStore{h.client}
	h2.c.Shutdown()
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 6443 {
		t.Fatalf("after the last shutdown %v %d, want the apiservers", ips, port)
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

// TestMembersThatDisagreeDoNotFight: two members whose views differ (here: which apiservers are
// ready, in fallback) overwrite each other at most once per peerHold each, not on every event.
func TestMembersThatDisagreeDoNotFight(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", newSource(ready("cp1", cp[0]), ready("cp2", cp[1])), asLeftByApiservers(6443, "192.0.2.9")...)
	c2, err := New(Config{Client: h.client, Source: newSource(ready("cp1", cp[0])), Member: "cp2", Endpoint: netip.MustParseAddrPort("192.0.2.2:16443"), Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	c2.store = clientStore{h.client}
	c2.synced.Store(true)
	h.reconcile()
	if _, err := c2.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.writes()
	for range 5 { // events: each sees the other's write
		if next := h.reconcile(); next != peerHold {
			t.Fatalf("held for %v, want %v", next, peerHold)
		}
		if _, err := c2.reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote %v within the hold", w)
	}
	h.clock.Step(peerHold)
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 2 {
		t.Fatalf("after the hold %v, want cp1's view", ips)
	}
}
