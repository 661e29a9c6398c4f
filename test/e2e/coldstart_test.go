package e2e

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// ColdStartSeedEnv fixes the seed of TestColdStart's start order and delays (default: random, logged).
const ColdStartSeedEnv = "SKEWGATE_COLDSTART_SEED"

// coldStartMaxDelay is the longest random delay before each part of each node starts.
const coldStartMaxDelay = 3 * time.Second

// Terms of coldNode.bound, the most a node may take from the moment its last part is up (its
// apiserver's /readyz answered 200, its skewgate and its data plane started) to the first kubectl
// success through its front. Every term is a property of the node's own parts; nothing in it
// depends on another node.
const (
	// discoveryInitialTimeout is discovery's InitialTimeout (Config.InitialTimeout, left at its
	// default by serve): skewgate's first Topology waits at most this long after its start for
	// the informers on its local apiserver (client-go reflectors retry a failed list with a backoff of
	// 0.8 s doubling, jitter up to 2x) and for its static upstream's first fetch and probe.
	discoveryInitialTimeout = 15 * time.Second
	// discoveryRequestTimeout is discovery's RequestTimeout (default): the longest one fetch (version,
	// /api, /apis) or one probe of the static upstream takes. A request sent to an apiserver that is
	// still starting can be held for seconds (measured: 2.4-4.4 s between the informers' sync and the
	// first Topology, spent in the static upstream's first fetch and probe). The first Topology with
	// the local apiserver ready is therefore due by max(skewgate start + discoveryInitialTimeout,
	// /readyz + discoveryRequestTimeout), plus a probe interval: until the cap skewgate waits for the
	// informers and that first fetch and probe; after it, a request in flight at /readyz ends within
	// discoveryRequestTimeout and the next probe sees the apiserver ready.
	discoveryRequestTimeout = 5 * time.Second
	// nodeProbeInterval is skewgate's /readyz probe and the data plane's health check interval
	// (front.NodeOptions default); the bound allows one of each.
	nodeProbeInterval = 200 * time.Millisecond
	// dataPlaneResubscribe is the data plane's pause before it reopens a failed xDS stream.
	dataPlaneResubscribe = 200 * time.Millisecond
	// publishSlack covers the two publishes between the apiserver coming up and its routes: the
	// Topology with it ready, then (once the data plane ACKed its cluster) with it proven; each waits
	// behind discovery's work-queue rate limit (10 syncs a second) and is pushed over xDS.
	publishSlack = 300 * time.Millisecond
	// watcherSlack is the watcher's own delay: its 20 ms pacing and the GET /readyz through the front
	// that precedes each kubectl run.
	watcherSlack = 500 * time.Millisecond
)

// bound is the most the node may take from its last part up to the first kubectl success:
//
//	max(skewgate start + discoveryInitialTimeout, /readyz + discoveryRequestTimeout) - last part up
//	                                              (first Topology with the local apiserver ready)
//	+ reconnect                                   (the data plane started before skewgate)
//	+ 2 x nodeProbeInterval + publishSlack + watcherSlack
//	+ how long the successful kubectl run took (process start, discovery through the front, the
//	  list: measured, as it depends on how loaded the machine is, not on the front)
//
// reconnect is grpc-go's connection backoff in the data plane (1 s, x1.6 per attempt, jitter 20%):
// after waiting v for skewgate the next attempt is at most 0.9 v + 1.2 s away, plus the data
// plane's own resubscribe pause. (This term is the stand-in's; Envoy's xDS retry backoff is its own.)
func (c *coldNode) bound() time.Duration {
	topology := max(c.skewgateStarted+discoveryInitialTimeout, c.readyz+discoveryRequestTimeout) - c.upAt()
	var reconnect time.Duration
	if v := c.skewgateStarted - c.dataPlaneStarted; v > 0 {
		reconnect = 9*v/10 + 1200*time.Millisecond + dataPlaneResubscribe
	}
	return max(0, topology) + reconnect + 2*nodeProbeInterval + publishSlack + watcherSlack + c.kubectlRun
}

// coldNode is what TestColdStart planned and saw for one node; times are from power-on.
type coldNode struct {
	name                                          string
	apiserverDelay, skewgateDelay, dataPlaneDelay time.Duration
	seed                                          uint64
	// When each part started, when the apiserver's /readyz answered 200, when the data plane served
	// its listener, when skewgate had published its first Topology, and the first 200 of GET /readyz
	// and the first kubectl success through the node's front.
	apiserverStarted, readyz, skewgateStarted, dataPlaneStarted time.Duration
	listener, topology, firstHTTP, firstKubectl                 time.Duration
	// testbedReturned is when testbed.Start returned: its /readyz poll waits for each answer (up to
	// 5 s) before the next, so it can be late; readyz is from watchReadyz.
	testbedReturned time.Duration
	// kubectlRun is how long the successful kubectl run took.
	kubectlRun time.Duration
}

// upAt is when the last part of the node was up.
func (c *coldNode) upAt() time.Duration { return max(c.readyz, c.skewgateStarted, c.dataPlaneStarted) }

func (c *coldNode) figures() map[string]any {
	return map[string]any{
		"delays_ms":                     map[string]float64{"apiserver": ms(c.apiserverDelay), "skewgate": ms(c.skewgateDelay), "data_plane": ms(c.dataPlaneDelay)},
		"data_plane_seed":               strconv.FormatUint(c.seed, 10),
		"apiserver_started_ms":          ms(c.apiserverStarted),
		"apiserver_readyz_ms":           ms(c.readyz),
		"skewgate_started_ms":           ms(c.skewgateStarted),
		"data_plane_started_ms":         ms(c.dataPlaneStarted),
		"first_topology_ms":             ms(c.topology),
		"data_plane_listener_ms":        ms(c.listener),
		"first_http_200_ms":             ms(c.firstHTTP),
		"first_kubectl_ms":              ms(c.firstKubectl),
		"readyz_to_kubectl_ms":          ms(c.firstKubectl - c.readyz),
		"last_part_up_to_kubectl_ms":    ms(c.firstKubectl - c.upAt()),
		"readyz_to_first_topology_ms":   ms(c.topology - c.readyz),
		"readyz_to_first_http_200_ms":   ms(c.firstHTTP - c.readyz),
		"skewgate_start_to_topology_ms": ms(c.topology - c.skewgateStarted),
		"bound_from_last_part_up_ms":    ms(c.bound()),
		"testbed_start_returned_ms":     ms(c.testbedReturned),
		"successful_kubectl_run_ms":     ms(c.kubectlRun),
	}
}

// TestColdStart is the cold start of issue 15: three control-plane nodes (old v1.35.4, new v1.36.3
// and old2 v1.35.4), each with its own skewgate and data plane (front.Node). Every apiserver is
// SIGKILLed (a power loss; etcd stays up), every skewgate and data plane stopped, then all of them
// start in a random order with random delays. Per node it measures the time from its apiserver's
// /readyz to the first kubectl success through that node's front, and asserts coldNode.bound from
// the moment the node's last part was up.
func TestColdStart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	specs := []testbed.ApiserverSpec{{Name: "old", Version: testbed.OldVersion}, {Name: "new", Version: testbed.NewVersion},
		{Name: "old2", Version: testbed.OldVersion}}
	tb := testbed.StartT(t, testbed.Config{Apiservers: specs})
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	nodes := newNodes(t, tb, false, names...)
	for _, n := range nodes {
		startNode(t, n)
	}
	t.Logf("every node serves kubectl through its own front (%s)", nodeNames(nodes))

	seed := coldStartSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	recs := make([]*coldNode, len(nodes))
	for i, n := range nodes {
		d := func() time.Duration { return time.Duration(rng.Int64N(int64(coldStartMaxDelay))) }
		recs[i] = &coldNode{name: n.Name, apiserverDelay: d(), skewgateDelay: d(), dataPlaneDelay: d()}
	}

	// Power off: every apiserver SIGKILLed, every data plane and skewgate stopped.
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if err := tb.Kill(n.Name); err != nil {
				t.Errorf("kill %s: %v", n.Name, err)
			}
		})
		wg.Go(func() {
			n.StopDataPlane()
			if err := n.StopSkewgate(); err != nil {
				t.Errorf("node %s: skewgate ended with %v", n.Name, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Power on.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t0 := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) } // the scenario's random start times
	for i, n := range nodes {
		r := recs[i]
		wg.Go(func() {
			at(r.apiserverDelay)
			r.apiserverStarted = time.Since(t0)
			if err := tb.Start(ctx, n.Name); err != nil {
				t.Errorf("apiserver %s: %v", n.Name, err)
				return
			}
			r.testbedReturned = time.Since(t0)
		})
		wg.Go(func() { r.readyz = watchReadyz(ctx, t, tb, n.Name, t0) })
		wg.Go(func() {
			at(r.skewgateDelay)
			r.skewgateStarted = time.Since(t0)
			if err := n.StartSkewgate(); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
			}
		})
		wg.Go(func() {
			at(r.dataPlaneDelay)
			r.dataPlaneStarted = time.Since(t0)
			var err error
			if r.seed, err = n.StartDataPlane(); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
				return
			}
			if err := n.WaitDataPlane(ctx); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
				return
			}
			r.listener = time.Since(t0)
		})
		wg.Go(func() { watchColdStart(ctx, t, tb, n, t0, r) })
	}
	wg.Wait()

	figures := map[string]any{"seed": strconv.FormatUint(seed, 10), "max_delay_ms": ms(coldStartMaxDelay),
		"etcd": "kept running (not part of the power loss)", "probe_interval_ms": ms(nodeProbeInterval),
		"discovery_initial_timeout_ms": ms(discoveryInitialTimeout), "discovery_request_timeout_ms": ms(discoveryRequestTimeout)}
	perNode := map[string]any{}
	for _, r := range recs {
		perNode[r.name] = r.figures()
		t.Logf("node %s: apiserver +%v, skewgate +%v, data plane +%v; /readyz at %v, first Topology at %v, listener at %v, first 200 at %v, first kubectl at %v: %v from /readyz, %v from its last part up",
			r.name, r.apiserverDelay.Round(time.Millisecond), r.skewgateDelay.Round(time.Millisecond), r.dataPlaneDelay.Round(time.Millisecond),
			r.readyz.Round(time.Millisecond), r.topology.Round(time.Millisecond), r.listener.Round(time.Millisecond), r.firstHTTP.Round(time.Millisecond),
			r.firstKubectl.Round(time.Millisecond), (r.firstKubectl - r.readyz).Round(time.Millisecond), (r.firstKubectl - r.upAt()).Round(time.Millisecond))
	}
	figures["nodes"] = perNode
	if t.Failed() {
		t.FailNow() // a part did not start: the timings mean nothing
	}
	writeResults(t, &env{tb: tb, f: &front.Front{DataPlane: nodesDataPlane()}}, figures)
	for _, r := range recs {
		if r.firstKubectl == 0 {
			t.Errorf("node %s: no kubectl success through its front within %v of power-on", r.name, 90*time.Second)
			continue
		}
		if took, bound := r.firstKubectl-r.upAt(), r.bound(); took > bound {
			t.Errorf("node %s: first kubectl success %v after its last part was up, want within %v (seed %d)", r.name, took, bound, seed)
		}
	}
}

// watchColdStart records when skewgate of n published its first Topology and when its front first
// answered GET /readyz with 200; from then on it runs kubectl (get ns, discovery through the front
// included) until the first success.
func watchColdStart(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *front.Node, t0 time.Time, r *coldNode) {
	tc, err := tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		t.Error(err)
		return
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 3 * time.Second}
	kc, cache := n.Kubeconfig(testbed.AdminByToken), t.TempDir()
	var lastErr string
	for ctx.Err() == nil {
		if r.topology == 0 {
			if s := n.Skewgate(); s != nil && s.Ready() {
				r.topology = time.Since(t0)
			}
		}
		if r.firstHTTP == 0 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL+"/readyz", nil)
			req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					r.firstHTTP = time.Since(t0)
				}
			}
		}
		if r.firstHTTP != 0 {
			run := time.Now()
			_, stderr, err := kubectlWithin(5*time.Second, kc, cache, "get", "ns", "-o", "name")
			if err == nil {
				r.firstKubectl, r.kubectlRun = time.Since(t0), time.Since(run)
				return
			}
			lastErr = stderr
		}
		time.Sleep(20 * time.Millisecond) // pacing the client loop
	}
	t.Errorf("node %s: front %s: no kubectl success (last: %s)", n.Name, n.URL, lastErr)
}

// watchReadyz returns when, after t0, the named apiserver first answered GET /readyz with 200. A
// probe starts every 20 ms whether or not the previous one answered: an apiserver coming up can hold
// a request for seconds, and the first 200 must not wait behind it.
func watchReadyz(ctx context.Context, t *testing.T, tb *testbed.Testbed, name string, t0 time.Time) time.Duration {
	c, err := tb.AdminHTTPClient()
	if err != nil {
		t.Error(err)
		return 0
	}
	c.Timeout = 2 * time.Second
	url := tb.MustApiserver(name).URL() + "/readyz"
	first := make(chan time.Duration, 1)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case d := <-first:
			return d
		case <-ctx.Done():
			t.Errorf("apiserver %s: no 200 from /readyz", name)
			return 0
		case <-tick.C:
			go func() {
				resp, err := c.Get(url)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					select {
					case first <- time.Since(t0):
					default:
					}
				}
			}()
		}
	}
}

func coldStartSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv(ColdStartSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", ColdStartSeedEnv, s)
		}
		t.Logf("cold start order and delays from %s=%d", ColdStartSeedEnv, seed)
		return seed
	}
	var b [8]byte
	crand.Read(b[:])
	seed := binary.LittleEndian.Uint64(b[:])
	t.Logf("cold start order and delays from seed %d; rerun with %s=%d to repeat them", seed, ColdStartSeedEnv, seed)
	return seed
}
