package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

// rounds runs n rounds of get, create and delete of a MutatingAdmissionPolicy with kubectl through
// kubeconfig, with `workers` in parallel, and counts the 404s and other failures.
func rounds(t *testing.T, kubeconfig, prefix string, n, workers int) (notFound, failed, total int64) {
	var nf, fl, tot atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				name := fmt.Sprintf("%s-%d", prefix, i)
				count := func(_, stderr string, err error) {
					tot.Add(1)
					switch {
					case err == nil:
					case isNotFound(stderr):
						nf.Add(1)
						if prefix == "front" {
							t.Logf("%s: 404 through skewgate: %s", name, strings.TrimSpace(stderr))
						}
					default:
						fl.Add(1)
						t.Logf("%s: %v %s", name, err, strings.TrimSpace(stderr))
					}
				}
				count(kubectl(kubeconfig, "get", mapResource))
				count(kubectlApply(kubeconfig, mapManifest(name), "create", "-f", "-"))
				count(kubectl(kubeconfig, "delete", mapResource, name, "--ignore-not-found=false", "--wait=false"))
			}
		}()
	}
	wg.Wait()
	return nf.Load(), fl.Load(), tot.Load()
}

// controlMinNotFoundShare is the least share of 404s the round-robin control must show. Each kubectl
// call is a new connection and the control alternates them over old (v1.35, no such API) and new,
// so about half of the calls meet old (README gives the share measured); 25% is far outside chance for 600
// calls yet low enough that only a control that stopped reaching old fails it.
const controlMinNotFoundShare = 0.25

// TestScenarioNoWrongNotFound is scenario 1: 200 rounds through the front, zero 404s; the same through
// a plain round-robin front shows the wrong-404 share skewgate removes.
func TestScenarioNoWrongNotFound(t *testing.T) {
	e := setup(t)
	nf, failed, total := rounds(t, e.f.Kubeconfig(testbed.AdminByToken), "front", 200, 4)
	t.Logf("through skewgate (%s): %d of %d kubectl calls answered 404, %d other failures", e.f.DataPlane, nf, total, failed)
	if nf != 0 || failed != 0 {
		t.Errorf("through skewgate: %d 404s and %d failures in %d calls, want none", nf, failed, total)
	}
	cnf, cfailed, ctotal := rounds(t, e.f.RoundRobinKubeconfig(testbed.AdminByToken), "rr", 200, 4)
	share := float64(cnf) / float64(max(ctotal, 1))
	t.Logf("control, plain round-robin: %d of %d kubectl calls answered 404 (%.0f%%), %d other failures", cnf, ctotal, 100*share, cfailed)
	writeResults(t, e, map[string]any{
		"rounds":                     200,
		"skewgate_calls":             total,
		"skewgate_404":               nf,
		"skewgate_other_failures":    failed,
		"roundrobin_calls":           ctotal,
		"roundrobin_404":             cnf,
		"roundrobin_404_share":       share,
		"roundrobin_other_failures":  cfailed,
		"roundrobin_min_share_bound": controlMinNotFoundShare,
	})
	if share < controlMinNotFoundShare {
		t.Errorf("the round-robin control answered 404 to %.0f%% of calls, want at least %.0f%%: the testbed is not skewed, so the scenario proves nothing",
			100*share, 100*controlMinNotFoundShare)
	}
}

// TestScenarioAPIResources is scenario 2: kubectl api-resources through the front lists the skewed
// API every time, with a fresh discovery cache each time.
func TestScenarioAPIResources(t *testing.T) {
	e := setup(t)
	kc := e.f.Kubeconfig(testbed.AdminByToken)
	for i := range 20 {
		out := mustKubectl(t, kc, "api-resources", "--cache-dir", t.TempDir(), "-o", "name")
		if !strings.Contains(out, mapResource+"."+mapGroup) {
			t.Fatalf("round %d: api-resources through the front lacks %s", i, mapResource)
		}
	}
	// The control: old alone does not list it.
	out := mustKubectl(t, e.tb.AdminTokenKubeconfig(), "--context", "old", "api-resources", "--cache-dir", t.TempDir(), "-o", "name")
	if strings.Contains(out, mapResource+"."+mapGroup) {
		t.Errorf("old lists %s itself: the testbed is not skewed", mapResource)
	}
}

// TestScenarioWatch is scenario 3: a watch through the front sees objects created over another
// connection, and outlives Envoy's default 15 s route timeout.
func TestScenarioWatch(t *testing.T) {
	e := setup(t)
	kc := e.f.Kubeconfig(testbed.AdminByToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kc, "get", mapResource, "--watch", "-o", "name")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(name string, within time.Duration) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("watch ended before %s: %s", name, stderr.String())
				}
				if strings.HasSuffix(l, "/"+name) {
					return
				}
			case <-timeout:
				t.Fatalf("watch did not see %s within %v", name, within)
			}
		}
	}
	direct := e.tb.AdminTokenKubeconfig()
	for _, name := range []string{"watch-1"} {
		if _, stderr, err := kubectlApply(direct, mapManifest(name), "--context", "new", "create", "-f", "-"); err != nil {
			t.Fatal(err, stderr)
		}
		expect(name, 20*time.Second)
	}
	// Quiet for longer than Envoy's default route timeout (15 s): a route with a timeout would have
	// ended the watch by now.
	quiet := time.NewTimer(20 * time.Second)
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("the watch ended during a quiet period: %s", stderr.String())
		}
		t.Fatalf("unexpected event %q", l)
	case <-quiet.C:
	}
	if _, stderr, err := kubectlApply(direct, mapManifest("watch-2"), "--context", "new", "create", "-f", "-"); err != nil {
		t.Fatal(err, stderr)
	}
	expect("watch-2", 20*time.Second)
}

// TestScenarioIdentities is scenario 6: bearer token and client certificate users are themselves
// through the front, as directly.
func TestScenarioIdentities(t *testing.T) {
	e := setup(t)
	type whoami struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	for _, c := range []testbed.Credential{testbed.AdminByToken, testbed.AdminByCert, testbed.LowPrivByToken, testbed.LowPrivByCert} {
		var front, direct whoami
		if err := json.Unmarshal([]byte(mustKubectl(t, e.f.Kubeconfig(c), "auth", "whoami", "-o", "json")), &front); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(mustKubectl(t, e.tb.KubeconfigPath(c), "--context", "new", "auth", "whoami", "-o", "json")), &direct); err != nil {
			t.Fatal(err)
		}
		f, d := front.Status.UserInfo, direct.Status.UserInfo
		t.Logf("%s: through the front %s %v, directly %s %v", c, f.Username, f.Groups, d.Username, d.Groups)
		if f.Username != d.Username || strings.Join(f.Groups, ",") != strings.Join(d.Groups, ",") || f.Username == "" {
			t.Errorf("%s: through the front %s %v, directly %s %v", c, f.Username, f.Groups, d.Username, d.Groups)
		}
	}
}
