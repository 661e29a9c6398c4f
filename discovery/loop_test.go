package discovery

import (
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// syncs is skewgate_discovery_syncs_total as reg exposes it, every result together.
func syncs(t testing.TB, reg prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "skewgate_discovery_syncs_total" {
			continue
		}
		n := 0.0
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
		return n
	}
	t.Fatal("no skewgate_discovery_syncs_total")
	return 0
}

func histogram(h prometheus.Histogram) (count uint64, sum float64) {
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// stepUntil steps clk 5 ms at a time (the work queue's per-item delay) until cond holds: time moves
// only when the test says so. The short real sleep lets the controller's goroutines run.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); clk.Step(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s (fake clock at %v)", what, clk.Now())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRenewalsRebuildNothing: three apiservers renewing their Leases (here 100 times each, what an
// apiserver does in 17 minutes) cause no rebuild and no Lease-event latency; a real change 2 s later
// (on the controller's fake clock) is published, and the latency it observes is its own, not the
// time since the first renewal.
func TestRenewalsRebuildNothing(t *testing.T) {
	pki, cert := testPKI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	var leases []*coordinationv1.Lease
	client := fake.NewClientset()
	for i := range 3 {
		up := newFakeUpstream(t, cert, "v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
		l := lease("apiserver-"+strconv.Itoa(i), "cp"+strconv.Itoa(i), up.addr(), clk.Now())
		client.Tracker().Add(l)
		leases = append(leases, l)
	}
	reg := prometheus.NewRegistry()
	c, err := New(Config{Client: client, Upstream: restFor(t, pki), Registry: reg, Clock: clk,
		Policy: AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, ProbeInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runController(t, c)
	stepUntil(t, clk, "three ready upstreams", func() bool {
		tp := c.Current()
		if tp == nil || len(tp.Upstreams) != 3 {
			return false
		}
		for _, u := range tp.Upstreams {
			if !u.Ready {
				return false
			}
		}
		return true
	})
	// synced runs one more sync and waits for it.
	synced := func(what string) {
		before := syncs(t, reg)
		c.requestSync()
		stepUntil(t, clk, what, func() bool { return syncs(t, reg) > before })
	}
	synced("a sync after the upstreams are ready")
	rebuilds, _ := histogram(c.metrics.rebuildDuration)
	events, eventsSum := histogram(c.metrics.leaseToTopology)
	syncsBefore := syncs(t, reg)
	byResult := func() (unchanged, rebuiltOrPublished float64) {
		return testutil.ToFloat64(c.metrics.syncs.WithLabelValues(syncUnchanged)),
			testutil.ToFloat64(c.metrics.syncs.WithLabelValues(syncRebuilt)) + testutil.ToFloat64(c.metrics.syncs.WithLabelValues(syncPublished))
	}
	unchanged, rebuilt := byResult()

	last := clk.Now()
	for range 100 {
		for _, l := range leases {
			l.Spec.RenewTime = &metav1.MicroTime{Time: last}
			if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll(t, 10*time.Second, "the informer to see the last renewal", func() bool {
		for _, l := range c.leases() {
			if l.Name == leases[2].Name {
				return l.Spec.RenewTime.Time.Equal(last)
			}
		}
		return false
	})
	synced("a sync after the renewals") // reads every renewed Lease: a rebuild would happen in it
	if u, r := byResult(); u == unchanged || r != rebuilt {
		t.Errorf("syncs after 300 renewals: %v more unchanged (want some), %v more rebuilt or published (want 0)", u-unchanged, r-rebuilt)
	}
	if got, _ := histogram(c.metrics.rebuildDuration); got != rebuilds {
		t.Errorf("300 renewals caused %d rebuilds, want 0", got-rebuilds)
	}
	if got, _ := histogram(c.metrics.leaseToTopology); got != events {
		t.Errorf("300 renewals observed %d Lease-event latencies, want 0", got-events)
	}
	t.Logf("300 renewals: %d rebuilds, %v syncs (probes that changed nothing included)", 0, syncs(t, reg)-syncsBefore)

	// A real change 2 s later: its latency is its own.
	clk.Step(2 * time.Second)
	holder := "apiserver-0_restarted"
	leases[0].Spec.HolderIdentity = &holder
	changed := clk.Now()
	if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, leases[0], metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stepUntil(t, clk, "the new holder's latency observed", func() bool {
		u, _ := c.Current().Upstream("cp0")
		n, _ := histogram(c.metrics.leaseToTopology)
		return u.Holder == holder && n == events+1
	})
	if _, sum := histogram(c.metrics.leaseToTopology); sum-eventsSum > clk.Since(changed).Seconds() {
		t.Errorf("Lease event to Topology: %.3fs, more than the %.3fs since the holder change: the time since the renewals, not its own latency", sum-eventsSum, clk.Since(changed).Seconds())
	}
}

// BenchmarkLeaseChurn: 5000 identity Leases (forged, without an address: all ignored) all renewed
// in every iteration, 50 of them with a new holder. Each renewal goes through the Lease handler's
// filter, and each iteration ends with the sync the changes ask for (the queue coalesces them). The
// informers and the fake clientset are left out: they are client-go's cost, not ours.
//
// It reports the heap the controller retains for those Leases after the churn (MiB-controller-5000-
// leases: the heap with its Topology and state for them, less the heap once it synced with no Lease,
// the Leases still alive), and the heap of the Lease objects themselves (MiB-lease-objects, what an
// informer's cache holds for them), each measured after a GC.
func BenchmarkLeaseChurn(b *testing.B) {
	leases := make([]*coordinationv1.Lease, 5000)
	c := leaseBench(b, "f", leases)
	ctx := b.Context()
	rebuilds, _ := histogram(c.metrics.rebuildDuration)
	b.ReportAllocs()
	n, syncs := 0, 0
	for b.Loop() {
		n++
		changed := false
		for i, old := range leases {
			l := old.DeepCopy()
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			if i%100 == n%100 {
				h := "holder-" + strconv.Itoa(n)
				l.Spec.HolderIdentity = &h
			}
			if c.leaseChanged(old, l) {
				changed = true
			}
			leases[i] = l
		}
		if changed {
			syncs++
			c.sync(ctx)
		}
	}
	after, _ := histogram(c.metrics.rebuildDuration)
	b.StopTimer()
	if t := c.Current(); t == nil || len(t.Ignored) != len(leases) {
		b.Fatalf("the last Topology does not ignore the %d Leases", len(leases))
	}
	withLeases := heapAfterGC()
	c.leases = func() []*coordinationv1.Lease { return nil }
	c.sync(ctx)
	if t := c.Current(); t == nil || len(t.Ignored) != 0 {
		b.Fatal("the Topology of no Lease still lists ignored ones")
	}
	withoutLeases := heapAfterGC()
	runtime.KeepAlive(leases)
	leases = nil
	withoutObjects := heapAfterGC()
	runtime.KeepAlive(c)
	b.ReportMetric(float64(after-rebuilds)/float64(n), "rebuilds/op")
	b.ReportMetric(float64(syncs)/float64(n), "syncs/op")
	b.ReportMetric((withLeases-withoutLeases)/(1<<20), "MiB-controller-5000-leases")
	b.ReportMetric((withoutLeases-withoutObjects)/(1<<20), "MiB-lease-objects")
}

// heapAfterGC is the live heap in bytes after a full collection.
func heapAfterGC() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}

// BenchmarkRenewalRebuilds: one op is one minute of a quiet 3-apiserver control plane, each
// apiserver (a fake one that serves discovery, so each Lease is a ready upstream) renewing its
// identity Lease every 10 s (18 renewals) and nothing else changing. Every renewal is followed by a
// sync, as a probe or a Lease's expiry timer may run one at any time; reports the rebuilds per minute
// that causes (target: 0) and the syncs per minute the Lease handler asks for itself (0: a renewal is
// no change).
func BenchmarkRenewalRebuilds(b *testing.B) {
	pki, cert := testPKI(b)
	leases := make([]*coordinationv1.Lease, 3)
	for i := range leases {
		up := newFakeUpstream(b, cert, "v1.36.3", docJSON(b, coreDoc()), docJSON(b, apisDoc(true)))
		leases[i] = lease("apiserver-cp"+strconv.Itoa(i), "cp"+strconv.Itoa(i), up.addr(), time.Now())
	}
	c, err := New(Config{Client: fake.NewClientset(), Upstream: restFor(b, pki), Registry: prometheus.NewRegistry(),
		Policy: AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		b.Fatal(err)
	}
	c.leases = func() []*coordinationv1.Lease { return leases }
	ctx := b.Context()
	ready := func() bool {
		t := c.Current()
		if t == nil || len(t.Upstreams) != len(leases) {
			return false
		}
		for _, u := range t.Upstreams {
			if !u.Ready {
				return false
			}
		}
		return true
	}
	// The workers fetch and probe on their own; the queue they ask syncs from is not running here,
	// so sync until their first results are in.
	for deadline := time.Now().Add(30 * time.Second); !ready(); {
		if time.Now().After(deadline) {
			b.Fatalf("no Topology with %d ready upstreams within 30s", len(leases))
		}
		c.sync(ctx)
		time.Sleep(20 * time.Millisecond)
	}
	c.sync(ctx) // whatever the last results changed
	rebuilds, _ := histogram(c.metrics.rebuildDuration)
	n, asked := 0, 0
	for b.Loop() {
		n++
		for range 6 { // every 10 s for a minute
			for i, old := range leases {
				l := old.DeepCopy()
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				leases[i] = l
				if c.leaseChanged(old, l) { // what the informer handler asks a sync for
					asked++
				}
				c.sync(ctx)
			}
		}
	}
	after, _ := histogram(c.metrics.rebuildDuration)
	if !ready() {
		b.Fatal("the upstreams are no longer ready: the figure would describe another control plane")
	}
	b.ReportMetric(float64(after-rebuilds)/float64(n), "rebuilds/min")
	b.ReportMetric(float64(asked)/float64(n), "syncs/min")
}

// leaseBench fills leases with renewed identity Leases without an address (hostnames prefix0, prefix1,
// ...), makes a controller that reads exactly them (no informers) and runs its first sync.
func leaseBench(b *testing.B, prefix string, leases []*coordinationv1.Lease) *Controller {
	pki, _ := testPKI(b)
	c, err := New(Config{Client: fake.NewClientset(), Upstream: restFor(b, pki), Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range leases {
		leases[i] = lease("apiserver-"+prefix+strconv.Itoa(i), prefix+strconv.Itoa(i), "", time.Now())
	}
	c.leases = func() []*coordinationv1.Lease { return leases }
	c.sync(b.Context())
	if t := c.Current(); t == nil || len(t.Ignored) != len(leases) {
		b.Fatalf("no first Topology with %d ignored Leases", len(leases))
	}
	return c
}
