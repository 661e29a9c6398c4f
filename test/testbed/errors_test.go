package testbed_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

func TestMissingBinaryIsAClearError(t *testing.T) {
	_, err := testbed.Start(context.Background(), testbed.Config{Dir: t.TempDir(), BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make testbed-bins") {
		t.Fatalf("err = %v, want a hint to run make testbed-bins", err)
	}
}

// A binary that exits at once must fail Start quickly with the tail of its log, not hang.
func TestEarlyExitShowsLogTail(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'fatal: pretend etcd cannot start' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "etcd-"+testbed.EtcdVersion), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{testbed.OldVersion, testbed.NewVersion} {
		if err := os.WriteFile(filepath.Join(bin, "kube-apiserver-"+v), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := testbed.Start(context.Background(), testbed.Config{Dir: t.TempDir(), BinDir: bin, ReadyTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "pretend etcd cannot start") || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("err = %v, want the log tail of the failed process", err)
	}
}

// An address already taken must be reported as such.
func TestPortInUse(t *testing.T) {
	binDir, err := testbed.FindBinDir()
	if err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat(filepath.Join(binDir, "etcd-"+testbed.EtcdVersion)); err != nil {
		t.Skipf("no etcd binary (run make testbed-bins): %v", err)
	}
	l, err := net.Listen("tcp", "127.9.9.250:2379") // where etcd of subnet 127.9.9.0/24 listens
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = testbed.Start(context.Background(), testbed.Config{Dir: t.TempDir(), Subnet: [2]byte{9, 9}})
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("err = %v, want address already in use", err)
	}
}
