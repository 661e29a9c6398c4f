// Package testuid runs a copy of the running test binary as another user, for tests of what a
// peer of another uid is refused. Tests only; it needs root.
package testuid

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Nobody is the uid (and gid) the copy runs as.
const Nobody = 65534

// RunAsNobody copies the test binary into dir (the build directory is root-only), runs it as
// Nobody with env added to its environment (the test's TestMain acts on it) and returns what it
// printed, trimmed. A copy that does not run fails the test.
func RunAsNobody(t *testing.T, dir, env string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(dir, "as-nobody")
	if err := os.WriteFile(client, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(client)
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test binary as uid %d: %v: %s", Nobody, err, out)
	}
	return strings.TrimSpace(string(out))
}
