package dataplane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func testDP(t *testing.T, seed uint64) *DataPlane {
	return &DataPlane{cfg: Config{Logf: t.Logf}, seed: seed, rng: rand.New(rand.NewPCG(seed, seed)), ctx: context.Background(),
		secrets: newSecretStore(context.Background(), t.Logf)}
}

func testCluster(t *testing.T, d *DataPlane, n int, mutate func(*clusterv3.Cluster)) *cluster {
	var addrs []string
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", 1000+i))
	}
	cfg := plainCluster("c", addrs...)
	if mutate != nil {
		mutate(cfg)
	}
	c, err := newCluster(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLeastRequestP2C: two random samples, the one with fewer active requests wins, ties go to
// the first (random) sample: equal hosts share picks evenly; a busier host of two still gets the
// picks where both samples land on it (1/4).
func TestLeastRequestP2C(t *testing.T) {
	c := testCluster(t, testDP(t, 7), 2, nil)
	const n = 4000
	count := func() map[*host]int {
		m := map[*host]int{}
		for range n {
			m[c.pickOnce()]++
		}
		return m
	}
	m := count()
	for _, h := range c.hosts {
		if share := float64(m[h]) / n; share < 0.45 || share > 0.55 {
			t.Errorf("idle equal hosts: %s got %.2f of picks, want about 0.5 (random ties)", h.addr, share)
		}
	}
	c.hosts[1].active.Store(3)
	m = count()
	if share := float64(m[c.hosts[1]]) / n; share < 0.20 || share > 0.30 {
		t.Errorf("busier host got %.2f of picks, want about 0.25 (only when both samples are it)", share)
	}
}

// TestSeedReproduces: the same seed gives the same choices; another seed others.
func TestSeedReproduces(t *testing.T) {
	seq := func(seed uint64) string {
		c := testCluster(t, testDP(t, seed), 5, nil)
		s := ""
		for range 40 {
			s += c.pickOnce().addr + " "
		}
		return s
	}
	if a, b := seq(11), seq(11); a != b {
		t.Errorf("seed 11 gave %s then %s", a, b)
	}
	if a, b := seq(11), seq(12); a == b {
		t.Errorf("seeds 11 and 12 gave the same 40 picks %s", a)
	}
}

// TestPanicThresholdZero: with healthy_panic_threshold 0 a cluster without a healthy host picks
// none (UH); with the default 50% it would pick among all hosts.
func TestPanicThresholdZero(t *testing.T) {
	c := testCluster(t, testDP(t, 1), 2, nil)
	for _, h := range c.hosts {
		h.healthy.Store(false)
	}
	if h := c.pickOnce(); h != nil {
		t.Errorf("panic threshold 0 picked unhealthy %s", h.addr)
	}
	d := testCluster(t, testDP(t, 1), 2, func(c *clusterv3.Cluster) { c.CommonLbConfig = nil })
	for _, h := range d.hosts {
		h.healthy.Store(false)
	}
	if h := d.pickOnce(); h == nil {
		t.Error("default panic threshold: no host picked although every host is unhealthy (panic mode uses all)")
	}
	c.hosts[0].healthy.Store(true)
	c.hosts[0].ejected.Store(true)
	if h := c.pickOnce(); h != nil {
		t.Error("an outlier-ejected host was picked")
	}
}

func hcCluster(t *testing.T, unhealthy, healthy uint32) *cluster {
	return testCluster(t, testDP(t, 1), 1, func(c *clusterv3.Cluster) {
		c.HealthChecks = []*corev3.HealthCheck{{Timeout: durationpb.New(1e9), Interval: durationpb.New(1e9),
			UnhealthyThreshold: wrapperspb.UInt32(unhealthy), HealthyThreshold: wrapperspb.UInt32(healthy),
			HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/readyz", CodecClientType: typev3.CodecClientType_HTTP1}}}}
	})
}

// TestHealthCheckTransitions: hosts start unhealthy and turn healthy at their first passing check;
// a non-200 marks a healthy host unhealthy at once whatever unhealthy_threshold says; network
// failures and timeouts need unhealthy_threshold in a row; afterwards healthy_threshold passes.
func TestHealthCheckTransitions(t *testing.T) {
	c := hcCluster(t, 3, 2)
	h := c.hosts[0]
	if h.healthy.Load() || c.pickOnce() != nil {
		t.Fatal("a host was usable before its first health check")
	}
	step := func(r hcResult) {
		c.record(h, r)
		h.checked.Store(true)
	}
	step(hcPass)
	if !h.healthy.Load() {
		t.Fatal("first passing check did not make the host healthy (healthy_threshold does not apply to it)")
	}
	step(hcFail)
	if h.healthy.Load() {
		t.Fatal("a non-200 did not mark the host unhealthy at once")
	}
	step(hcPass)
	if h.healthy.Load() {
		t.Fatal("healthy after 1 pass, healthy_threshold is 2")
	}
	step(hcPass)
	if !h.healthy.Load() {
		t.Fatal("not healthy after healthy_threshold passes")
	}
	step(hcNetwork)
	step(hcNetworkTimeout)
	if !h.healthy.Load() {
		t.Fatal("unhealthy after 2 network failures, unhealthy_threshold is 3")
	}
	step(hcNetwork)
	if h.healthy.Load() {
		t.Fatal("still healthy after unhealthy_threshold network failures")
	}
	// A pass between network failures resets the count.
	c2 := hcCluster(t, 2, 1)
	h2 := c2.hosts[0]
	c2.record(h2, hcPass)
	h2.checked.Store(true)
	for _, r := range []hcResult{hcNetwork, hcPass, hcNetwork} {
		c2.record(h2, r)
	}
	if !h2.healthy.Load() {
		t.Error("a pass did not reset the network failure count")
	}
}
