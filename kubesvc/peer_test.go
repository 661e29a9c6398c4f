package kubesvc

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// TestMembersThatDisagreeBackOff: two members whose views differ for good (cp2's discovery sees
// only cp1) overwrite each other with a growing hold, 2s doubling to 1m, and then once a minute;
// each counts its overwrites and logs one error per streak. After a quiet period the hold starts
// over at 2s.
func TestMembersThatDisagreeBackOff(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", newSource(ready("cp1", cp[0]), ready("cp2", cp[1])), asLeftByApiservers(6443, "192.0.2.9")...)
	core, logs := zapobserver.New(zap.ErrorLevel)
	h.c.log = zap.New(core)
	src2 := newSource(ready("cp1", cp[0]))
	c2, err := New(Config{Client: h.client, Source: src2, Member: "cp2", Endpoint: netip.MustParseAddrPort("192.0.2.2:16443"), Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	c2.store = clientStore{h.client}
	c2.synced.Store(true)
	start := h.clock.Now()
	var at []time.Duration // when cp1 overwrote cp2's write, from start
	run := func(until time.Duration) {
		for h.clock.Since(start) < until {
			before := testutil.ToFloat64(h.c.m.peerOverwrites)
			n1 := h.reconcile()
			if testutil.ToFloat64(h.c.m.peerOverwrites) > before {
				at = append(at, h.clock.Since(start))
			}
			n2, err := c2.reconcile(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			step := n1
			if step == 0 || (n2 > 0 && n2 < step) {
				step = n2
			}
			if step > 0 { // 0: a write, which the other member sees as an event
				h.clock.Step(step)
			}
		}
	}
	run(5 * time.Minute)
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i]-at[i-1])
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	if len(gaps) < len(want) || !slices.Equal(gaps[:len(want)], want) {
		t.Fatalf("cp1 overwrote cp2 at %v (gaps %v), want gaps starting %v", at, gaps, want)
	}
	for _, g := range gaps[len(want):] {
		if g != time.Minute {
			t.Fatalf("gaps %v: past the cap, want 1m", gaps)
		}
	}
	if n := logs.FilterMessageSnippet("members disagree").Len(); n != 1 {
		t.Errorf("logged the disagreement %d times, want once per streak", n)
	}
	// They agree: nothing to overwrite. After the quiet period, a new disagreement starts at 2s.
	src2.set(ready("cp1", cp[0]), ready("cp2", cp[1]))
	h.clock.Step(time.Minute)
	h.reconcile()
	c2.reconcile(context.Background())
	h.clock.Step(peerQuiet + time.Second)
	src2.set(ready("cp1", cp[0]))
	c2.reconcile(context.Background())
	h.reconcile() // overwrites cp2's new write: a new streak
	if hold := h.c.peer.hold(h.clock.Now()); hold != peerHoldMin {
		t.Fatalf("hold after the quiet period %v, want %v", hold, peerHoldMin)
	}
}

// TestNoReconcileBeforeTheFirstTopology: before discovery published a Topology, nothing is written
// and no member Lease is judged (each would read as no apiserver's).
func TestNoReconcileBeforeTheFirstTopology(t *testing.T) {
	src := &fakeSource{ch: make(chan struct{})}
	h := newHarness(t, "cp1", "192.0.2.1:16443", src, asLeftByApiservers(6443, "192.0.2.9")...)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.writes()
	h.reconcile()
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote %v before the first Topology", w)
	}
	if n := testutil.ToFloat64(h.c.m.badLeases.WithLabelValues(BadNotAnApiserver)); n != 0 {
		t.Fatalf("judged a member Lease before the first Topology")
	}
	src.set(ready("cp1", cp[0]))
	h.reconcile()
	if ips, _ := h.published(); !slices.Equal(ips, []string{"192.0.2.1"}) {
		t.Fatalf("published %v", ips)
	}
}
