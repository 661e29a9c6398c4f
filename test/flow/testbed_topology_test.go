package flow

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/test/testbed"
)

var (
	keyPods = discovery.ResourceKey{Version: "v1", Resource: "pods"}
	keyMAP  = discovery.ResourceKey{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
)

// waitFor waits up to timeout for a Topology of c that satisfies ok.
func waitFor(t *testing.T, c *discovery.Controller, timeout time.Duration, what string, ok func(*discovery.Topology) bool) *discovery.Topology {
	t.Helper()
	deadline := time.After(timeout)
	for {
		topo, changed := c.Watch()
		if topo != nil && ok(topo) {
			return topo
		}
		select {
		case <-changed:
		case <-deadline:
			version := "none"
			if topo != nil {
				version = topo.Version
			}
			t.Fatalf("timed out after %v waiting for: %s; last topology version: %s", timeout, what, version)
		}
	}
}

// TestTestbedTopology runs discovery against real v1.35.4 and v1.36.3 apiservers: old is matched
// through a static entry (no annotation on 1.35 Leases), new through its annotation; a SIGKILLed
// apiserver's resources answer 503 (never 404) until it is back.
func TestTestbedTopology(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the testbed (etcd and two kube-apiservers)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	// The informers talk to old, which stays up; in a cluster they use the kubeconfig's address.
	cfg := tb.RESTConfig(old.URL(), testbed.AdminByToken)
	subnet := netip.PrefixFrom(netip.MustParseAddr(neu.IP.String()), 24).Masked()
	c, err := discovery.New(discovery.Config{
		Client:        kubernetes.NewForConfigOrDie(cfg),
		Metadata:      metadata.NewForConfigOrDie(cfg),
		Upstream:      cfg,
		Static:        []discovery.StaticUpstream{{Name: "old", Address: old.Address()}},
		Policy:        discovery.AddressPolicy{CIDRs: []netip.Prefix{subnet}},
		ProbeInterval: 200 * time.Millisecond,
		Logger:        zaptest.NewLogger(t),
		Registry:      prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	onlyNew := discovery.Decision{Action: discovery.ActionRoute, Set: "new"}
	topo := waitFor(t, c, time.Minute, "both upstreams with capabilities", func(tp *discovery.Topology) bool {
		o, ok1 := tp.Upstream("old")
		n, ok2 := tp.Upstream("new")
		return ok1 && ok2 && o.Capabilities && n.Capabilities && o.Ready && n.Ready
	})
	if d := topo.Decide(keyMAP, "list"); d != onlyNew {
		t.Errorf("mutatingadmissionpolicies: %+v, want only new", d)
	}
	if d := topo.Decide(keyPods, "list"); d.Action != discovery.ActionDefault {
		t.Errorf("pods: %+v, want served by both", d)
	}
	if u, _ := topo.Upstream("old"); u.Source != discovery.SourceLeaseStatic || u.Version != testbed.OldVersion {
		t.Errorf("old: %+v", u)
	}
	if u, _ := topo.Upstream("new"); u.Source != discovery.SourceLease || u.Version != testbed.NewVersion || u.Address != neu.Address() {
		t.Errorf("new: %+v", u)
	}
	t.Logf("skewed resources: %d, e.g. %+v", len(topo.Skewed()), topo.Skewed()[0])

	// SIGKILL leaves the Lease behind: readiness notices first, staleness removes it.
	killed := time.Now()
	if err := tb.Kill("new"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, time.Minute, "mutatingadmissionpolicies unavailable", func(tp *discovery.Topology) bool {
		return tp.Decide(keyMAP, "get").Action == discovery.ActionUnavailable
	})
	t.Logf("SIGKILL -> 503 decision: %v", time.Since(killed).Round(time.Millisecond))
	topo = waitFor(t, c, 90*time.Second, "new out of the topology", func(tp *discovery.Topology) bool {
		_, ok := tp.Upstream("new")
		return !ok
	})
	t.Logf("SIGKILL -> out of every capable set (stale Lease): %v", time.Since(killed).Round(time.Millisecond))
	if d := topo.Decide(keyMAP, "get"); d.Action != discovery.ActionUnavailable {
		t.Errorf("after departure: %+v, want unavailable (503), never a 404", d)
	}

	if err := tb.Start(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	waitFor(t, c, time.Minute, "new routable again", func(tp *discovery.Topology) bool {
		u, ok := tp.Upstream("new")
		return ok && u.Ready && tp.Decide(keyMAP, "get") == onlyNew
	})
	t.Logf("/readyz -> routable Topology: %v", time.Since(ready).Round(time.Millisecond))
}
