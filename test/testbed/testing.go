package testbed

import (
	"context"
	"fmt"
	"testing"
)

// StartT starts a testbed for a test: it fails the test when the host cannot run one (only -short
// skips); it prints every log tail if the test failed, and tears everything down at cleanup.
func StartT(t testing.TB, cfg Config) *Testbed {
	t.Helper()
	if testing.Short() {
		t.Skip("testbed: skipped in -short mode (needs real etcd and kube-apiservers)")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	tb, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range append([]string{"etcd"}, names(tb)...) {
				t.Logf("---- last log lines of %s ----\n%s", name, tb.LogTail(name, 30))
			}
		}
		tb.Close()
	})
	return tb
}

func names(tb *Testbed) []string {
	var out []string
	for _, a := range tb.Apiservers() {
		out = append(out, a.Name)
	}
	return out
}

// Describe says how to reach every apiserver, for people.
func (tb *Testbed) Describe() string {
	s := fmt.Sprintf("etcd: %s\n", tb.EtcdURL)
	for _, a := range tb.Apiservers() {
		s += fmt.Sprintf("%-6s %s at %s (pid %d, log %s)\n", a.Name, a.Version, a.URL(), a.PID, a.LogPath)
	}
	s += fmt.Sprintf("\nkubectl --kubeconfig %s --context <name> get --raw /version   # admin by token\n", tb.AdminTokenKubeconfig())
	s += fmt.Sprintf("kubectl --kubeconfig %s --context <name> auth whoami         # admin by client certificate\n", tb.AdminCertKubeconfig())
	return s
}
