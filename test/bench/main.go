// Command bench measures skewgate against Kubernetes' in-tree Mixed Version Proxy and the apiserver
// itself, side by side in one run on the testbed, and writes bench/results/ (results.md, results.json,
// latency.svg). `make bench` runs it. Ratios are measured in the same run because machines are noisy.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/test/checkout"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Results is everything one run measured; results.json holds it, written when the run ends.
type Results struct {
	// Passed is the run's verdict (see verdict): a run that shows what README says does not happen
	// is written too, says so in Failures, and README must not quote it.
	Passed   bool     `json:"passed"`
	Failures []string `json:"failures,omitempty"`
	// Commit is the checkout's HEAD when the run ended, Dirty whether code (anything outside
	// bench/results) differed from it: the figures describe that commit only.
	Commit      string        `json:"commit"`
	Dirty       bool          `json:"dirty"`
	CPUs        int           `json:"cpus"`
	Machine     string        `json:"machine"`
	Date        time.Time     `json:"date"`
	DataPlane   string        `json:"dataPlane"`
	Latency     []sample      `json:"latency"`
	Convergence []convergence `json:"convergence"`
	Scale       []scaleResult `json:"scale"`
	ExtProc     string        `json:"extproc"`
	// Benchmarks are the in-process benchmarks of ExtProc by name (without the -GOMAXPROCS
	// suffix), then unit: BenchmarkDecide's ns/op is benchmarks.BenchmarkDecide.ns/op.
	Benchmarks map[string]map[string]float64 `json:"benchmarks"`
}

func main() {
	out := flag.String("out", "bench/results", "folder for results.md, results.json and latency.svg")
	dur := flag.Duration("duration", 3*time.Second, "length of each fixed-rate run")
	ratesFlag := flag.String("rates", "50,200,500", "request rates per second")
	scaleChild := flag.Int("scale-child", 0, "internal: measure one scale point in this process and print JSON")
	extprocOut := flag.String("extproc", "", "file with `go test -bench` output of the ext_proc benchmarks to include")
	flag.Parse()
	if *scaleChild > 0 {
		fatal(json.NewEncoder(os.Stdout).Encode(measureScale(*scaleChild)))
		return
	}
	var rates []int
	for _, r := range strings.Split(*ratesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		fatal(err)
		rates = append(rates, n)
	}
	res, err := run(rates, *dur)
	fatal(err)
	if *extprocOut != "" {
		b, err := os.ReadFile(*extprocOut)
		fatal(err)
		res.ExtProc = string(b)
		res.Benchmarks, err = parseBenchmarks(res.ExtProc)
		fatal(err)
	}
	res.Commit, res.Dirty = checkout.Current()
	res.CPUs = runtime.NumCPU()
	res.Failures = verdict(res)
	res.Passed = len(res.Failures) == 0
	fatal(write(*out, res))
	md, _ := os.ReadFile(filepath.Join(*out, "results.md"))
	fmt.Print(string(md))
	if !res.Passed {
		fatal(fmt.Errorf("the run did not pass (written with passed false): %s", strings.Join(res.Failures, "; ")))
	}
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s", model, runtime.NumCPU(), runtime.Version())
}

func run(rates []int, d time.Duration) (*Results, error) {
	dir, err := os.MkdirTemp("", "skewgate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+f+"\n", a...) }
	// One testbed with the in-tree Mixed Version Proxy on: old proxies what only new serves.
	tb, err := testbed.Start(ctx, testbed.Config{Dir: filepath.Join(dir, "testbed"), PeerProxy: true, Logf: logf})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	f, err := front.Start(ctx, tb, front.Options{Dir: filepath.Join(dir, "front"), Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := &Results{Machine: machine(), Date: time.Now().UTC(), DataPlane: f.DataPlane}
	logf("front served by the %s", f.DataPlane)

	// Objects to GET.
	kc := tb.AdminTokenKubeconfig()
	for _, args := range [][]string{
		{"create", "configmap", "bench", "-n", "default"},
	} {
		if out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kc, "--context", "new"}, args...)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kubectl %v: %v %s", args, err, out)
		}
	}
	mapYAML := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"bench"},"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["deployments"]}]},"reinvocationPolicy":"Never","mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{}"}}]}}`
	cmd := exec.Command("kubectl", "--kubeconfig", kc, "--context", "new", "create", "-f", "-")
	cmd.Stdin = strings.NewReader(mapYAML)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("create map: %v %s", err, out)
	}

	tc, err := tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		return nil, err
	}
	direct := target{"a. new apiserver directly (floor)", tb.MustApiserver("new").URL()}
	inTree := target{"b. old apiserver + in-tree MVP", tb.MustApiserver("old").URL()}
	sg := target{"c. skewgate front (" + f.DataPlane + ")", f.URL}
	paths := []struct{ resource, verb, path string }{
		{"mutatingadmissionpolicies", "GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/bench"},
		{"mutatingadmissionpolicies", "LIST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
		{"configmaps", "GET", "/api/v1/namespaces/default/configmaps/bench"},
		{"configmaps", "LIST", "/api/v1/namespaces/default/configmaps"},
	}
	for _, p := range paths {
		targets := []target{direct, inTree, sg}
		if p.resource == "configmaps" {
			targets = []target{direct, sg}
		}
		for _, rate := range rates {
			for _, t := range targets {
				// A fresh client per run: every target starts with the same cold connection pool.
				s := openLoop(newClient(tc), testbed.AdminToken, t.url+p.path, rate, d)
				s.Target, s.Resource, s.Verb = t.name, p.resource, p.verb
				logf("%-45s %-26s %-4s %4d/s p50 %.2fms p99 %.2fms errors %d", t.name, p.resource, p.verb, rate, s.P50, s.P99, s.Errors)
				res.Latency = append(res.Latency, s)
			}
		}
	}

	conv, err := measureConvergence(tb, f, tc, logf)
	if err != nil {
		return nil, err
	}
	res.Convergence = conv
	for _, n := range []int{10, 100, 1000} {
		s, err := scaleInChild(n)
		if err != nil {
			return nil, err
		}
		logf("scale %d upstreams: build %.2fms translate %.2fms snapshot %d KiB RSS %d MiB", n, s.BuildMs, s.TranslateMs, s.SnapshotKiB, s.RSSMiB)
		res.Scale = append(res.Scale, s)
	}
	return res, nil
}

// waitReady polls url's /readyz until 200.
func waitReady(c *http.Client, url string) {
	for {
		resp, err := c.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
