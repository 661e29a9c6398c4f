package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Helpers of the co-located scenarios (coldstart_test.go, restarts_test.go): one node per apiserver,
// each with its own skewgate and data plane (front.Node).

// newNodes prepares one node per named apiserver (with an informer switch: front.NodeOptions);
// cleanup stops them.
func newNodes(t *testing.T, tb *testbed.Testbed, informerSwitch bool, names ...string) []*front.Node {
	t.Helper()
	var nodes []*front.Node
	for i, name := range names {
		n, err := front.NewNode(tb, front.NodeOptions{Dir: t.TempDir(), Errorf: t.Errorf, Apiserver: name, Host: 10 + i,
			InformerSwitch: informerSwitch, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		nodes = append(nodes, n)
	}
	return nodes
}

// startNode starts skewgate and the data plane of n and waits until kubectl works through its front.
func startNode(t *testing.T, n *front.Node) {
	t.Helper()
	if err := n.StartSkewgate(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartDataPlane(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.WaitDataPlane(ctx); err != nil {
		t.Fatal(err)
	}
	kc := n.Kubeconfig(testbed.AdminByToken)
	cache := t.TempDir()
	for {
		_, stderr, err := kubectlWithin(5*time.Second, kc, cache, "get", "ns", "-o", "name")
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s: kubectl never succeeded through its front %s: %v\n%s", n.Name, n.URL, err, stderr)
		}
		time.Sleep(100 * time.Millisecond) // pacing the client loop
	}
}

// kubectlWithin runs the real kubectl with a request timeout and its own discovery cache directory
// (a fresh one makes kubectl fetch discovery through the front, as a client after a reboot would).
func kubectlWithin(timeout time.Duration, kubeconfig, cacheDir string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	argv := append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir, "--request-timeout=" + timeout.String()}, args...)
	cmd := exec.CommandContext(ctx, "kubectl", argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// isRefused tells a connection the front's address refused (nothing listens there) from any other
// transport error.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// nodesDataPlane is the data_plane of a results file of the co-located scenarios.
func nodesDataPlane() string {
	return dataplane.Name + ", one per node (seeds in the figures and the log)"
}

// ms is d in milliseconds with a tenth of precision, for results files.
func ms(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

// metricSum is the sum of the series of the named counter or gauge in reg that have a label with
// the value label (every series when label is ""); 0 if there is none.
func metricSum(t *testing.T, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == label }) {
				continue
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// nodeNames lists the nodes' names.
func nodeNames(nodes []*front.Node) string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.Name)
	}
	return strings.Join(s, ", ")
}
