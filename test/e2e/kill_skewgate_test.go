package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Bounds of killSkewgate, each from a stated property of the parts (coldstart_test.go defines the
// terms): the data plane keeps its configuration while skewgate is away, so every request is
// answered as before (200, 201; never a wrong 404, never a lost write); it reconnects within
// grpc-go's backoff after the time skewgate was away; the new process publishes its first Topology
// within discovery's initial timeout.
const (
	// metricPoll covers the test's own polling of the new process (a scrape of /metrics and a GET of
	// /readyz, then 10 ms) that notices the data plane is back.
	metricPoll = 100 * time.Millisecond
)

// reconnectBound is the most the data plane may take, after the new skewgate listens, to be back on
// it: grpc-go's connection backoff after waiting v (see coldNode.bound), its resubscribe pause, and
// the test's polling.
func reconnectBound(v time.Duration) time.Duration {
	return 9*v/10 + 1200*time.Millisecond + dataPlaneResubscribe + metricPoll
}

// killSkewgate SIGKILLs skewgate of n while clients read, write and watch through n's front, and
// starts a new process on the same sockets after away: no shutdown, no drain, its gRPC streams cut
// mid-stream. Every read must get 200 and every write 201 (the data plane keeps its last config and
// ext_proc fails open to the route table); every acknowledged write must be readable afterwards and
// be seen by a watch opened through the front before the kill, which must stay open.
func killSkewgate(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *front.Node) map[string]any {
	old := n.Skewgate()
	if old == nil || !old.Ready() {
		t.Fatalf("skewgate of node %s is not running with a Topology before the kill", n.Name)
	}
	c := httpsClient(t, tb, nil)
	c.Timeout = 10 * time.Second
	w := startWatch(t, tb, n.URL)
	tr := startTraffic(t, tb, n.URL, 4, restartTrafficOps)
	wr := startWrites(t, c, n.URL, "sigkill")
	time.Sleep(warm)

	killed := time.Now()
	killErr := n.KillSkewgate()
	exited := time.Now()
	time.Sleep(away)
	started := time.Now()
	if err := n.StartSkewgate(); err != nil {
		tr.halt()
		wr.halt()
		w.halt()
		t.Fatal(err)
	}
	serving := time.Now()
	sg := n.Skewgate()
	var dpBack, extProcBack, topology, acked time.Time
	for (dpBack.IsZero() || extProcBack.IsZero() || topology.IsZero() || acked.IsZero()) && ctx.Err() == nil {
		// One scrape for the three metrics; each time is when the scrape answered (the event came
		// before it).
		families, err := sg.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		now, snap := time.Now(), scraped(families)
		if dpBack.IsZero() && metricSum(t, snap, "skewgate_xds_streams", "") > 0 {
			dpBack = now
		}
		if extProcBack.IsZero() && metricSum(t, snap, "skewgate_extproc_decisions_total", "") > 0 {
			extProcBack = now
		}
		if acked.IsZero() && metricSum(t, snap, "skewgate_xds_acks_total", "") > 0 {
			acked = now
		}
		if topology.IsZero() && sg.Ready() {
			topology = time.Now()
		}
		time.Sleep(10 * time.Millisecond) // polling the new process (no event to wait on)
	}
	time.Sleep(2 * warm) // and after, with the new process serving
	calls := append(tr.halt(), wr.halt()...)
	acks := wr.acknowledged()
	seen, watchErr := w.waitFor(acks.configmaps, 10*time.Second)
	if killErr != nil {
		t.Error(killErr)
	}
	if ctx.Err() != nil {
		t.Fatalf("the new skewgate: data plane back on xDS %v, on ext_proc %v, first Topology %v, first ACK %v (zero: never)",
			!dpBack.IsZero(), !extProcBack.IsZero(), !topology.IsZero(), !acked.IsZero())
	}

	away := serving.Sub(killed)
	all, byOp := count(calls, func(call) bool { return true })
	during, _ := count(calls, func(c call) bool { return c.start.After(killed) && c.start.Before(acked) })
	t.Logf("skewgate of node %s SIGKILLed under traffic (exited %v after the signal; the new process listened %v after the kill, %v after its start): data plane back on xDS %v and on ext_proc %v after it listened (bound %v), first Topology %v, first ACK %v; %d requests, by outcome%s; between the kill and the new process's first ACK%s; %d configmaps and %d %s acknowledged, %d seen by the watch",
		n.Name, exited.Sub(killed).Round(time.Millisecond), away.Round(time.Millisecond), serving.Sub(started).Round(time.Millisecond),
		dpBack.Sub(serving).Round(time.Millisecond), extProcBack.Sub(serving).Round(time.Millisecond), reconnectBound(away),
		topology.Sub(serving).Round(time.Millisecond), acked.Sub(serving).Round(time.Millisecond),
		len(calls), all, during, len(acks.configmaps), len(acks.policies), mapResource, len(seen))
	logFailures(t, "skewgate SIGKILL", calls)

	bad := violations{phase: "skewgate SIGKILL", want: "200 (reads) or 201 (writes)"}
	for _, c := range calls {
		if c.code != c.op.want() {
			bad.add(c)
		}
	}
	bad.report(t)
	lost := lostWrites(t, tb, acks)
	for _, name := range lost {
		t.Errorf("acknowledged write %s lost", name)
	}
	if len(acks.configmaps) == 0 || len(acks.policies) == 0 {
		t.Errorf("%d configmaps and %d %s acknowledged: the phase proves nothing", len(acks.configmaps), len(acks.policies), mapResource)
	}
	if watchErr != nil {
		t.Errorf("the watch opened through the front before the kill: %v", watchErr)
	}
	if b := reconnectBound(away); dpBack.Sub(serving) > b || extProcBack.Sub(serving) > b {
		t.Errorf("the data plane was back on the new skewgate's xDS %v and ext_proc %v after it listened, want within %v (%v away)",
			dpBack.Sub(serving), extProcBack.Sub(serving), b, away)
	}
	if d, b := topology.Sub(serving), discoveryInitialTimeout+nodeProbeInterval; d > b {
		t.Errorf("the new skewgate published its first Topology %v after it listened, want within %v", d, b)
	}
	return map[string]any{"requests": len(calls), "by_outcome": all, "by_op": byOp, "kill_to_first_ack": during,
		"acknowledged_configmaps": len(acks.configmaps), "acknowledged_" + mapResource: len(acks.policies), "lost_writes": len(lost),
		"watch_events_seen": len(seen), "watch_error": fmt.Sprint(watchErr),
		"kill_to_exit_ms": ms(exited.Sub(killed)), "kill_to_new_process_listening_ms": ms(away), "start_to_listening_ms": ms(serving.Sub(started)),
		"listening_to_data_plane_xds_ms": ms(dpBack.Sub(serving)), "listening_to_extproc_ms": ms(extProcBack.Sub(serving)),
		"reconnect_bound_ms": ms(reconnectBound(away)), "listening_to_first_topology_ms": ms(topology.Sub(serving)),
		"listening_to_first_ack_ms": ms(acked.Sub(serving)), "first_topology_bound_ms": ms(discoveryInitialTimeout + nodeProbeInterval)}
}

// scraped is one scrape of a skewgate's /metrics, read as a Gatherer.
type scraped []*dto.MetricFamily

func (s scraped) Gather() ([]*dto.MetricFamily, error) { return s, nil }

// writes is a client creating configmaps and (the skewed API) policies through a front, with a
// plain HTTP client: no retry hides what the front answers.
type writes struct {
	traffic
	mu         sync.Mutex
	configmaps []string
	policies   []string
}

type acknowledged struct{ configmaps, policies []string }

func startWrites(t *testing.T, c *http.Client, url, prefix string) *writes {
	t.Helper()
	cm := trafficOp{name: "create configmap", path: "/api/v1/namespaces/default/configmaps", shared: true, method: http.MethodPost}
	mp := trafficOp{name: "create " + mapResource, path: "/apis/" + mapGroup + "/v1/" + mapResource, method: http.MethodPost}
	w := &writes{traffic: traffic{stop: make(chan struct{})}}
	w.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			op, name := cm, fmt.Sprintf("%s-%d", prefix, i)
			var obj any = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}}
			if i%2 == 1 {
				op = mp
				p := mapObject(name)
				p.APIVersion, p.Kind = mapGroup+"/v1", "MutatingAdmissionPolicy"
				obj = p
			}
			body, _ := json.Marshal(obj)
			start := time.Now()
			code, answer, err := post(c, url+op.path, body)
			if err == nil && code != http.StatusCreated {
				err = fmt.Errorf("%d: %.200s", code, answer)
			}
			w.mu.Lock()
			w.calls = append(w.calls, call{op: op, start: start, end: time.Now(), code: code, refused: code == 0 && isRefused(err), err: err})
			if code == http.StatusCreated && op == cm {
				w.configmaps = append(w.configmaps, name)
			} else if code == http.StatusCreated {
				w.policies = append(w.policies, name)
			}
			w.mu.Unlock()
			if code == 0 {
				time.Sleep(20 * time.Millisecond) // pacing: a refused connection answers at once
			}
		}
	})
	return w
}

func (w *writes) acknowledged() acknowledged {
	w.mu.Lock()
	defer w.mu.Unlock()
	return acknowledged{configmaps: w.configmaps, policies: w.policies}
}

func post(c *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// lostWrites are the acknowledged writes an apiserver does not have (read directly from new, which
// serves both resources; the apiservers share etcd).
func lostWrites(t *testing.T, tb *testbed.Testbed, acks acknowledged) []string {
	t.Helper()
	direct := kubernetes.NewForConfigOrDie(tb.RESTConfig(tb.MustApiserver("new").URL(), testbed.AdminByToken))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lost []string
	for _, name := range acks.configmaps {
		if _, err := direct.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			lost = append(lost, "configmap "+name+": "+err.Error())
		}
	}
	for _, name := range acks.policies {
		if _, err := direct.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			lost = append(lost, mapResource+" "+name+": "+err.Error())
		}
	}
	return lost
}

// watch is a watch of configmaps in default through a front, opened at the current resource
// version: it records the names of ADDED objects, and how it ended if it ended before halt.
type watch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	added  map[string]bool
	ended  error
	update chan struct{}
}

func startWatch(t *testing.T, tb *testbed.Testbed, url string) *watch {
	t.Helper()
	c := httpsClient(t, tb, nil)
	c.Timeout = 0 // a stream
	code, body, err := do(t, c, http.MethodGet, url+"/api/v1/namespaces/default/configmaps?limit=1", testbed.AdminToken)
	if err != nil || code != http.StatusOK {
		t.Fatalf("list configmaps through the front: %d %v %.200s", code, err, body)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || list.Metadata.ResourceVersion == "" {
		t.Fatalf("list configmaps through the front: no resourceVersion (%v): %.200s", err, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="+list.Metadata.ResourceVersion, nil)
	req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("watch configmaps through the front: %v %v", err, resp)
	}
	w := &watch{cancel: cancel, done: make(chan struct{}), added: map[string]bool{}, update: make(chan struct{}, 1)}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		dec := json.NewDecoder(r)
		for {
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata struct {
						Name string `json:"name"`
					} `json:"metadata"`
				} `json:"object"`
			}
			err := dec.Decode(&ev)
			w.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					w.ended = fmt.Errorf("ended at %s before the test stopped it: %w", time.Now().Format(time.StampMilli), err)
				}
				w.mu.Unlock()
				return
			}
			if ev.Type == "ADDED" {
				w.added[ev.Object.Metadata.Name] = true
			}
			w.mu.Unlock()
			select {
			case w.update <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

// waitFor waits (at most timeout: the watch's own delivery) until the watch saw every name, then
// stops it; it returns the names seen and an error for a watch that ended early or missed a name.
func (w *watch) waitFor(names []string, timeout time.Duration) ([]string, error) {
	deadline := time.After(timeout)
	defer w.halt()
	for {
		w.mu.Lock()
		var seen, missing []string
		for _, n := range names {
			if w.added[n] {
				seen = append(seen, n)
			} else {
				missing = append(missing, n)
			}
		}
		ended := w.ended
		w.mu.Unlock()
		switch {
		case ended != nil:
			return seen, ended
		case len(missing) == 0:
			return seen, nil
		}
		select {
		case <-w.update:
		case <-deadline:
			return seen, fmt.Errorf("%d acknowledged configmaps never seen within %v, the first: %v", len(missing), timeout, missing[:min(5, len(missing))])
		}
	}
}

func (w *watch) halt() {
	w.cancel()
	<-w.done
}
