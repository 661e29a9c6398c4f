package kubesvc

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

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

// TestShutdownLogsLeavingOnlyWhenItWrote: a member that was not in the set (its front down) writes
// nothing when it stops, and does not claim to have left the endpoints; one that was, does.
func TestShutdownLogsLeavingOnlyWhenItWrote(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h2 := newHarness(t, "cp2", "192.0.2.2:16443", twoApiservers())
	h2.client, h2.c.cfg.Client, h2.c.store = h.client, h.client, clientStore{h.client}
	core, logs := zapobserver.New(zap.InfoLevel)
	h2.c.log = zap.New(core)
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.reconcile() // {cp1}; cp2 has no Lease
	h.writes()
	h2.c.Shutdown()
	if w := h.writes(); !slices.Equal(w, []string{"delete leases/cp2"}) {
		t.Fatalf("cp2's shutdown wrote %v", w)
	}
	if n := logs.FilterMessage("left the kubernetes endpoints").Len(); n != 0 {
		t.Errorf("cp2 logged leaving without writing")
	}
	core1, logs1 := zapobserver.New(zap.InfoLevel)
	h.c.log = zap.New(core1)
	h.c.Shutdown()
	if n := logs1.FilterMessage("left the kubernetes endpoints").Len(); n != 1 {
		t.Errorf("cp1 logged leaving %d times after writing the apiservers, want once", n)
	}
}

// laggingStore is an informer cache that has not seen the latest Lease events: its Leases are a
// snapshot, its objects current.
type laggingStore struct {
	clientStore
	snapshot []*coordinationv1.Lease
}

func (s laggingStore) leases() []*coordinationv1.Lease { return s.snapshot }

// TestSimultaneousShutdowns: two members stopping at once, each with a cache that still holds the
// other's Lease, leave the apiservers' addresses, not a stopped front with no writer: each computes
// the set from the API's Leases, and cp1, whose write of {cp2} lands after cp2 left, writes again.
func TestSimultaneousShutdowns(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h2 := newHarness(t, "cp2", "192.0.2.2:16443", twoApiservers())
	h2.client = h.client
	h2.c.cfg.Client = h.client
	h.memberLease("cp1", "192.0.2.1:16443", h.clock.Now())
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now())
	h.reconcile()
	h2.reconcile()
	if ips, _ := h.published(); len(ips) != 2 {
		t.Fatalf("before: %v", ips)
	}
	snapshot := clientStore{h.client}.leases()
	h.c.store = laggingStore{clientStore{h.client}, snapshot}
	h2.c.store = laggingStore{clientStore{h.client}, snapshot}
	// cp2 deletes its Lease while cp1's write of the set without cp1 is in flight.
	var once sync.Once
	h.client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() {
			if err := h.client.Tracker().Delete(coordinationv1.SchemeGroupVersion.WithResource("leases"), Namespace, "cp2"); err != nil {
				t.Error(err)
			}
		})
		return false, nil, nil
	})
	h.c.Shutdown()
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 6443 {
		t.Fatalf("after cp1's shutdown %v %d, want the apiservers (cp2 left during its write)", ips, port)
	}
	h2.c.Shutdown()
	if ips, port := h.published(); !slices.Equal(ips, []string{"192.0.2.1", "192.0.2.2"}) || port != 6443 {
		t.Fatalf("after both shutdowns %v %d, want the apiservers", ips, port)
	}
}

// TestOwnLeaseBeforeTheCacheHasIt: a member that has just created (restarted) or renewed its Lease
// publishes itself even while its informer cache has not seen that write: it would otherwise write
// the set without itself over a peer that already has it in (a reversal each way, seen end to end).
func TestOwnLeaseBeforeTheCacheHasIt(t *testing.T) {
	h := newHarness(t, "cp1", "192.0.2.1:16443", twoApiservers(), asLeftByApiservers(6443, "192.0.2.1", "192.0.2.2")...)
	h.memberLease("cp2", "192.0.2.2:16443", h.clock.Now())
	h.c.store = laggingStore{clientStore{h.client}, clientStore{h.client}.leases()} // cp2 only
	if err := h.c.renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 2 || ips[0] != "192.0.2.1" || ips[1] != "192.0.2.2" {
		t.Errorf("after creating its Lease, with a cache without it: published %v, want both fronts", ips)
	}
	// Stopping, it leaves itself out although it still remembers its last write.
	h.c.stopping.Store(true)
	h.reconcile()
	if ips, _ := h.published(); len(ips) != 1 || ips[0] != "192.0.2.2" {
		t.Errorf("stopping: published %v, want cp2 alone", ips)
	}
}
