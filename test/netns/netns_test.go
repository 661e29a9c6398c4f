package netns

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestNamespace: the test runs in a namespace of its own (not its parent's), where any host of Subnet can
// be bound and reached, and a ClusterIP is routed through lo from HostAddr.
func TestNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root and unshare")
	}
	Require(t)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	// Main re-executed this binary under unshare, which execs it: the parent is the first run.
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", os.Getppid()))
	if err != nil {
		t.Fatal(err)
	}
	if parent == self {
		t.Fatalf("still in the network namespace %s of the process that started the test", self)
	}
	addr := netip.AddrFrom4([4]byte{198, 18, 0, 77})
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatalf("bind a host of %s: %v", Subnet, err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial %s: %v", ln.Addr(), err)
	}
	c.Close()
	out, err := exec.Command("ip", "route", "get", "10.96.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route get: %v %s", err, out)
	}
	if got := string(out); !strings.Contains(got, "dev lo") || !strings.Contains(got, "src "+HostAddr.String()) {
		t.Errorf("route to a ClusterIP: got %q, want dev lo src %s", got, HostAddr)
	}
}

// TestOnlyLo: setup never reconfigures a namespace with an interface besides lo (the host's, should
// the marker leak into a test started there).
func TestOnlyLo(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		ok        bool
	}{
		{"fresh", "1: lo: <LOOPBACK> mtu 65536 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n", true},
		{"host", "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n2: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n", false},
		{"garbage", "x\n", false},
	} {
		if err := onlyLo(tc.out); (err == nil) != tc.ok {
			t.Errorf("%s: onlyLo = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
