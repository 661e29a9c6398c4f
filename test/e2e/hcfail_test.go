package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

const (
	hcFailGroup  = "hcfail.skewgate.test"
	hcFailHeader = "X-Envoy-Immediate-Health-Check-Fail"
)

// hcFailBackend is an aggregated API server a user could run: it answers every request 200 and
// adds x-envoy-immediate-health-check-fail to every response to a request that came through an
// apiserver (the availability check included, which only the apiserver sees).
func hcFailBackend(t *testing.T, ip net.IP) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set(hcFailHeader, "true")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/apis/"+hcFailGroup+"/v1" {
			fmt.Fprintf(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":%q,"resources":[]}`, hcFailGroup+"/v1")
			return
		}
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s.Listener.Close()
	s.Listener = l
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, &hits
}

// hcFailManifests: an ExternalName Service naming the backend's loopback address (the aggregator
// resolves it and dials that address itself; an EndpointSlice may not name a loopback address), the
// APIService, and a Role that lets the ordinary user list its things.
func hcFailManifests(ip string, port int) string {
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: hcfail-things, namespace: default}
rules: [{apiGroups: ["` + hcFailGroup + `"], resources: ["things"], verbs: ["list"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: hcfail-things, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: hcfail-things}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: ` + testbed.LowPrivUser + `}]
---
apiVersion: v1
kind: Service
metadata: {name: hcfail, namespace: default}
spec: {type: ExternalName, externalName: "` + ip + `"}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.` + hcFailGroup + `}
spec:
  group: ` + hcFailGroup + `
  version: v1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {namespace: default, name: hcfail, port: ` + strconv.Itoa(port) + `}
`
}

// getHeader GETs url with token and returns the status and the header's values.
func getHeader(c *http.Client, url, token string) (int, []string, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Values(hcFailHeader), nil
}

// TestImmediateHealthCheckFailIgnored: an ordinary user's aggregated API backend answers with
// x-envoy-immediate-health-check-fail; each apiserver passes the header through, so through the
// front every such response reaches the data plane. Envoy's router would mark the apiserver
// unhealthy for each (and with panic threshold 0 answer everyone 503 until the next /readyz pass);
// skewgate's upstream filters remove the header first: the data plane marks nobody, the user gets
// the backend's answer without the header, and a client beside the attack gets only 200s.
func TestImmediateHealthCheckFailIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	backend, hits := hcFailBackend(t, net.IPv4(127, 0, 0, 1))
	host, portStr, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "https://"))
	port, _ := strconv.Atoi(portStr)

	f, marked := frontCounting(t, tb, "marked unhealthy by")

	admin := tb.AdminTokenKubeconfig()
	if out, stderr, err := kubectlApply(admin, hcFailManifests(host, port), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v %s %s", err, out, stderr)
	}
	attackPath := "/apis/" + hcFailGroup + "/v1/namespaces/default/things"

	// Straight to each apiserver: the header comes through, so the attack reaches the data plane.
	direct := httpsClient(t, tb, nil)
	for _, a := range tb.Apiservers() {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			code, vals, err := getHeader(direct, a.URL()+attackPath, testbed.LowPrivToken)
			if err == nil && code == http.StatusOK && len(vals) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: GET %s: %d %v header %v; want the backend's 200 with %s passed through", a.Name, attackPath, code, err, vals, hcFailHeader)
			}
		}
	}

	const attacks = 200
	attacker := httpsClient(t, tb, nil)
	normalClient := httpsClient(t, tb, nil)
	before := hits.Load()
	attackBy, leaked := map[int]int{}, 0
	normalBy := map[int]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range attacks {
			code, vals, err := getHeader(attacker, f.URL+attackPath, testbed.LowPrivToken)
			if err != nil {
				t.Logf("attack: %v", err)
			}
			attackBy[code]++
			if len(vals) > 0 {
				leaked++
			}
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		code, _, err := do(t, normalClient, http.MethodGet, f.URL+"/api/v1/namespaces/default", testbed.AdminToken)
		if err != nil {
			t.Logf("normal client: %v", err)
		}
		normalBy[code]++
	}
	reached := hits.Load() - before
	normalFailed := 0
	for code, n := range normalBy {
		if code != http.StatusOK {
			normalFailed += n
		}
	}
	t.Logf("through the front (%s): %d attack requests by status %v, %d reached the backend, %d responses to the attacker still carried the header; normal client by status %v; hosts marked unhealthy: %d",
		f.DataPlane, attacks, attackBy, reached, leaked, normalBy, marked.Load())
	writeResults(t, &env{tb: tb, f: f}, map[string]any{
		"attack_requests": attacks, "attack_by_status": attackBy, "attack_reached_backend": reached, "attack_header_leaked": leaked,
		"normal_by_status": normalBy, "normal_failed": normalFailed, "hosts_marked_unhealthy": marked.Load(),
	})
	if attackBy[http.StatusOK] == 0 || reached == 0 {
		t.Fatalf("the attack got %v and reached the backend %d times: it proves nothing", attackBy, reached)
	}
	if normalFailed != 0 {
		t.Errorf("the client beside the attack: %d requests failed (%v), want none", normalFailed, normalBy)
	}
	if leaked != 0 || attackBy[http.StatusOK] != attacks {
		t.Errorf("attacker: %v, %d responses with the header; want %d × 200 without it", attackBy, leaked, attacks)
	}
	if f.DataPlane != "envoy" && marked.Load() != 0 {
		t.Errorf("the data plane marked an apiserver unhealthy %d times, want never", marked.Load())
	}
}
