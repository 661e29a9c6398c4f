package front

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// processArgs are the flags of a skewgate whose apiserver does not exist: it serves its listeners
// and never has a Topology.
func processArgs(t *testing.T, dir string) []string {
	t.Helper()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: none, context: {cluster: none, user: u}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + kc, "--static-upstream=none=127.0.0.1:1",
		"--xds-listen=unix://" + filepath.Join(dir, "xds.sock"), "--extproc-listen=unix://" + filepath.Join(dir, "extproc.sock"),
		"--http-listen=127.0.0.1:0"}
	for _, f := range []string{"front-cert-file", "front-key-file", "envoy-upstream-ca-file", "front-proxy-cert-file", "front-proxy-key-file"} {
		args = append(args, "--"+f+"="+filepath.Join(dir, f))
	}
	return args
}

// TestSkewgateProcess: the harness's skewgate is a process of its own: a bad flag fails the start
// with skewgate's own message; SIGTERM ends it with exit status 0 and its sockets removed; SIGKILL
// leaves them behind, and the next process starts on the same paths, as another process.
func TestSkewgateProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the skewgate binary")
	}
	dir := t.TempDir()
	args := processArgs(t, dir)

	if _, err := startSkewgate("bad flag", filepath.Join(dir, "bad.log"), append(args, "--probe-interval=1ns"), t.Logf); err == nil ||
		!strings.Contains(err.Error(), "--probe-interval=1ns: must be from 100ms") {
		t.Fatalf("a start with --probe-interval=1ns: %v, want skewgate's own refusal of the flag", err)
	}

	first, err := startSkewgate("first", filepath.Join(dir, "skewgate.log"), args, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if first.XDSAddr != filepath.Join(dir, "xds.sock") || first.ExtProcAddr != filepath.Join(dir, "extproc.sock") {
		t.Errorf("listening on %s and %s, want the sockets of its flags", first.XDSAddr, first.ExtProcAddr)
	}
	if first.Ready() || first.Discovery.Current() != nil {
		t.Error("ready with a Topology, with no apiserver to learn one from")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := first.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady without a Topology: %v, want the deadline", err)
	}
	families, err := first.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goroutines float64
	for _, f := range families {
		if f.GetName() == "go_goroutines" {
			goroutines = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if goroutines == 0 {
		t.Errorf("no go_goroutines in its /metrics (%d families)", len(families))
	}
	if err := first.Stop(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit status 0", err)
	}
	if _, err := os.Stat(first.XDSAddr); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after SIGTERM its xDS socket is still there (%v): no clean shutdown", err)
	}

	second, err := startSkewgate("second", filepath.Join(dir, "skewgate.log"), args, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if second.PID == first.PID {
		t.Errorf("the restart has the pid %d of the first process", first.PID)
	}
	if err := second.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(second.XDSAddr); err != nil {
		t.Errorf("after SIGKILL its xDS socket is gone (%v): it had a shutdown after all", err)
	}
	third, err := startSkewgate("third", filepath.Join(dir, "skewgate.log"), args, t.Logf)
	if err != nil {
		t.Fatalf("a start on the sockets a SIGKILLed process left: %v", err)
	}
	if err := third.Stop(); err != nil {
		t.Fatal(err)
	}
}
