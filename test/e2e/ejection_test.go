package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Attack requests: a group whose aggregated APIService has no backend (every apiserver answers it
// 503), a list that cannot finish within its ?timeout= (1ns: 504 every time), and one that may
// (1ms: measured on the testbed a mix of 504, 200 and an aborted response, which the client sees as
// a reset).
const (
	brokenGroup   = "broken.skewgate.test"
	brokenPath    = "/apis/" + brokenGroup + "/v1"
	timeoutPath   = "/api/v1/namespaces/default/configmaps?timeout=1ns"
	racyPath      = "/api/v1/namespaces/default/configmaps?timeout=1ms"
	attacksPerKey = 50 // of each kind, per apiserver
)

// brokenAPIService points at a Service that does not exist, like a metrics-server that is gone.
const brokenAPIService = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.` + brokenGroup + `
spec:
  group: ` + brokenGroup + `
  version: v1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service:
    namespace: default
    name: no-such-backend
    port: 443
`

// TestGatewayAnswersEjectNobody: an ordinary user (alice, allowed to list configmaps in default)
// sends, per apiserver, 50 requests for a group whose APIService backend is down (503 from every
// apiserver), 50 lists with ?timeout=1ns (504) and 50 with ?timeout=1ms (504, 200 or an aborted
// response), through the front, while a normal client reads
// beside them. The apiservers' answers are not evidence that they are down: the normal client gets
// only 200s, and the data plane ejects no apiserver.
func TestGatewayAnswersEjectNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	f, ejections := frontCounting(t, tb, "outlier detection ejected")

	admin := tb.AdminTokenKubeconfig()
	if out, stderr, err := kubectlApply(admin, brokenAPIService, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply APIService: %v %s %s", err, out, stderr)
	}
	// Its own Role: the aggregated view role is filled by the controller manager, which the testbed
	// does not run.
	mustKubectl(t, admin, "create", "role", "configmap-reader", "-n", "default", "--verb=list", "--resource=configmaps")
	mustKubectl(t, admin, "create", "rolebinding", "alice-configmaps", "-n", "default", "--role=configmap-reader", "--user="+testbed.LowPrivUser)

	// What each apiserver itself answers, straight to it: the attack is only an attack if it gets
	// these answers. The broken group answers 503 once each apiserver has the APIService; the
	// 1ms list answers 504.
	direct := httpsClient(t, tb, nil)
	for _, a := range tb.Apiservers() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body, err := do(t, direct, http.MethodGet, a.URL()+brokenPath, testbed.LowPrivToken)
			if err == nil && code == http.StatusServiceUnavailable {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: GET %s: %d %v %.200s, want the aggregator's 503", a.Name, brokenPath, code, err, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The RoleBinding reaches each apiserver's authorizer through its informer.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, body, err := do(t, direct, http.MethodGet, a.URL()+"/api/v1/namespaces/default/configmaps", testbed.LowPrivToken)
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: alice cannot list configmaps: %d %v %.200s", a.Name, code, err, body)
			}
		}
		for _, p := range []string{timeoutPath, racyPath} {
			// A list whose response had started when the deadline passed is aborted
			// (http.ErrAbortHandler: a reset stream, or a closed HTTP/1 connection): status 0.
			got := map[int]int{}
			for range 30 {
				code, _, err := do(t, direct, http.MethodGet, a.URL()+p, testbed.LowPrivToken)
				if err != nil {
					t.Logf("%s: GET %s: %v", a.Name, p, err)
				}
				got[code]++
			}
			t.Logf("%s answers GET %s directly: by status %v", a.Name, p, got)
			if p == timeoutPath && (got[http.StatusGatewayTimeout]+got[http.StatusInternalServerError] != 30 || got[http.StatusGatewayTimeout] == 0) {
				t.Fatalf("%s: GET %s answered %v, want 504 (or now and then 500) every time", a.Name, p, got)
			}
		}
	}

	n := attacksPerKey * len(tb.Apiservers())
	var jobs []string
	for range n {
		jobs = append(jobs, brokenPath, timeoutPath, racyPath)
	}
	var attack recorder
	var sample sync.Map // the first body of each request kind and status
	var resets, unexpected atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	attacker := httpsClient(t, tb, nil)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(jobs)); i = next.Add(1) - 1 {
				code, body, err := do(t, attacker, http.MethodGet, f.URL+jobs[i], testbed.LowPrivToken)
				if !attackAnswer(jobs[i], code, body) {
					unexpected.Add(1)
					t.Logf("attack %s: unexpected answer %d %v %.300s", jobs[i], code, err, body)
				}
				attack.record(jobs[i], code, err)
				if code == http.StatusServiceUnavailable && strings.Contains(body, "reset") {
					resets.Add(1) // the apiserver reset the stream: a local-origin failure to Envoy
				}
				key := fmt.Sprintf("%s %d", jobs[i], code)
				if _, seen := sample.LoadOrStore(key, body); !seen {
					t.Logf("attack %s: %v %.300s", key, err, body)
				}
			}
		}()
	}
	attackDone := make(chan struct{})
	go func() { wg.Wait(); close(attackDone) }()

	// The normal client, beside the attack until it is over and for as many requests again.
	var normal recorder
	normalClient := httpsClient(t, tb, nil)
	get := func() {
		code, body, err := do(t, normalClient, http.MethodGet, f.URL+"/api/v1/namespaces/default", testbed.AdminToken)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d: %.200s", code, body)
		}
		normal.record("get", code, err)
	}
	during := 0
	for running := true; running; during++ {
		select {
		case <-attackDone:
			running = false
		default:
		}
		get()
	}
	for range during {
		get()
	}

	attackBy := map[string]map[int]int{}
	for _, o := range attack.out {
		if attackBy[o.op] == nil {
			attackBy[o.op] = map[int]int{}
		}
		attackBy[o.op][o.code]++
	}
	normalBy, _, window := normal.summary()
	failed := len(normal.out) - normalBy[http.StatusOK]
	t.Logf("attack through the front (%s): %v; %d streams the apiserver reset; normal client: %d requests (%d during the attack), %d failed, by status %v, non-2xx window %v; %d ejections",
		f.DataPlane, attackBy, resets.Load(), len(normal.out), during, failed, normalBy, window.Round(time.Millisecond), ejections.Load())
	normal.logDistinctErrors(t)
	writeResults(t, &env{tb: tb, f: f}, map[string]any{
		"attack_by_status": attackBy, "attack_upstream_resets": resets.Load(), "normal_requests": len(normal.out), "normal_during_attack": during,
		"normal_failed": failed, "normal_by_status": normalBy, "ejections": ejections.Load(),
	})
	// README: each of these requests got the apiserver's answer (503, 504, and for the racy list 504,
	// 200, the apiserver's own 500, or a stream it reset), so the attack is the attack described.
	if unexpected.Load() != 0 || attackBy[brokenPath][http.StatusServiceUnavailable] != n || attackBy[timeoutPath][http.StatusGatewayTimeout] == 0 {
		t.Errorf("through the front the attack got %v (%d answers not the apiserver's own): want %d × 503 for %s, 504 (or the apiserver's 500) for %s, and for %s only 200, 504, the apiserver's 500 or a reset",
			attackBy, unexpected.Load(), n, brokenPath, timeoutPath, racyPath)
	}
	if failed != 0 {
		t.Errorf("the normal client beside the attack: %d of %d requests failed (%v), want none", failed, len(normal.out), normalBy)
	}
	if f.DataPlane != "envoy" && ejections.Load() != 0 {
		t.Errorf("the data plane ejected an apiserver %d times, want never", ejections.Load())
	}
}

// attackAnswer tells whether code and body are what the apiserver answers the attack request path
// (measured straight to each apiserver above): the broken group 503; the 1ns list 504, or now and
// then the apiserver's own 500 "context deadline exceeded" (its storage call ran out of time first;
// measured: 1 of 100 through the front) or a stream it aborted; the 1ms list 200, 504, that 500, or, for a response the
// apiserver aborted, the data plane's 503 for an upstream reset.
func attackAnswer(path string, code int, body string) bool {
	switch path {
	case brokenPath:
		return code == http.StatusServiceUnavailable
	case timeoutPath:
		// The apiserver aborts a 1ns list now and then too (measured: 1 of 100 through the front).
		return code == http.StatusGatewayTimeout || code == http.StatusInternalServerError && apiserverFailure(body, code) ||
			code == http.StatusServiceUnavailable && strings.Contains(body, "reset")
	}
	switch code {
	case http.StatusOK, http.StatusGatewayTimeout:
		return true
	case http.StatusInternalServerError:
		return apiserverFailure(body, code)
	case http.StatusServiceUnavailable:
		return strings.Contains(body, "reset")
	}
	return false
}

// apiserverFailure tells an apiserver's own error Status with that code (its timeout filter's carries
// no kind, only the fields).
func apiserverFailure(body string, code int) bool {
	var st struct {
		Status string `json:"status"`
		Code   int    `json:"code"`
	}
	return json.Unmarshal([]byte(body), &st) == nil && st.Status == "Failure" && st.Code == code
}

// frontCounting starts a front on tb whose data plane's log lines are logged and counted when their
// format contains line.
func frontCounting(t *testing.T, tb *testbed.Testbed, line string) (*front.Front, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	logf := func(format string, args ...any) {
		if strings.Contains(format, line) {
			n.Add(1)
		}
		t.Logf(format, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)
	return f, &n
}
