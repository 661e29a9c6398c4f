package testbed_test

import (
	"context"
	"fmt"
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

// TestMain lets the test binary stand in for etcd: run under the name etcd-<version>, it binds
// the address of its --listen-client-urls as etcd does, and exits with the kernel's error if that
// fails (so the message TestPortInUse looks for is the kernel's, not one the test wrote).
func TestMain(m *testing.M) {
	if strings.HasPrefix(filepath.Base(os.Args[0]), "etcd-") {
		os.Exit(standInEtcd(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func standInEtcd(args []string) int {
	for _, a := range args {
		if u, ok := strings.CutPrefix(a, "--listen-client-urls=http://"); ok {
			l, err := net.Listen("tcp", u)
			if err != nil {
				fmt.Fprintf(os.Stderr, "stand-in etcd: %v\n", err)
				return 1
			}
			l.Close()
			fmt.Fprintf(os.Stderr, "stand-in etcd: bound %s, which the test holds\n", u)
			return 2
		}
	}
	fmt.Fprintln(os.Stderr, "stand-in etcd: no --listen-client-urls")
	return 3
}

// An address already taken must be reported as such: with the test binary standing in for etcd
// (always: no testbed binary needed), and with the real etcd (skipped only by -short, as every
// testbed test; without the binary it fails, naming make testbed-bins).
func TestPortInUse(t *testing.T) {
	t.Run("stand-in etcd", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := t.TempDir()
		if err := os.Symlink(self, filepath.Join(bin, "etcd-"+testbed.EtcdVersion)); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{testbed.OldVersion, testbed.NewVersion} {
			if err := os.WriteFile(filepath.Join(bin, "kube-apiserver-"+v), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		portInUse(t, bin, [2]byte{9, 8})
	})
	t.Run("real etcd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("testbed: skipped in -short mode (needs the real etcd)")
		}
		binDir, err := testbed.FindBinDir()
		if err != nil {
			t.Fatal(err)
		}
		portInUse(t, binDir, [2]byte{9, 9})
	})
}

func portInUse(t *testing.T, binDir string, subnet [2]byte) {
	addr := fmt.Sprintf("127.%d.%d.250:2379", subnet[0], subnet[1]) // where etcd of that subnet listens
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = testbed.Start(context.Background(), testbed.Config{Dir: t.TempDir(), BinDir: binDir, Subnet: subnet, ReadyTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "its address is already in use by another process") {
		t.Fatalf("err = %v, want the kernel's address already in use and the testbed's hint", err)
	}
}
