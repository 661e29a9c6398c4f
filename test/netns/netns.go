package netns

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// Marker is the environment variable that tells the re-executed test binary it already runs inside
// its own network namespace.
const Marker = "SKEWGATE_NETNS"

var (
	// Subnet is the test range made local inside the namespace: 198.18.0.0/15 is reserved for
	// benchmarking (RFC 2544), so it is neither loopback nor anyone's real network.
	Subnet = netip.MustParsePrefix("198.18.0.0/24")
	// HostAddr is the namespace's own address in Subnet: the source of connections to ClusterIPs, and
	// the address a node object can name. Host 254, outside what test/testbed hands out (1-250).
	HostAddr = netip.MustParseAddr("198.18.0.254")
	// ServiceCIDR is the apiservers' --service-cluster-ip-range; it is routed through lo so kube-proxy's
	// DNAT in the nat table's OUTPUT chain sees every packet to a ClusterIP.
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
)

// setupErr is why this process is not inside a ready namespace; nil once it is. Tests learn it through
// Require.
var setupErr = errors.New("netns: Main was not called from TestMain")

// Main is a TestMain: it runs m inside a fresh network namespace, re-executing the test binary there
// when needed, and exits. In -short mode, and when the namespace cannot be made (not root, no
// unshare or ip), m runs in place and every test that calls Require fails with the reason.
func Main(m *testing.M) {
	flag.Parse()
	if os.Getenv(Marker) != "" {
		setupErr = setup()
		os.Exit(m.Run())
	}
	if testing.Short() {
		setupErr = errors.New("netns: not set up in -short mode")
		os.Exit(m.Run())
	}
	if err := check(); err != nil {
		setupErr = err
		os.Exit(m.Run())
	}
	os.Exit(reexec())
}

// Ready is nil once this process runs inside the namespace Main made and set up, else why not.
// Code that changes the network (kube-proxy's iptables rules) checks it, never the marker alone: a
// marker that leaked into a process on the host is not a namespace.
func Ready() error { return setupErr }

// Require fails the test unless it runs inside the namespace Main made.
func Require(t testing.TB) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("this test needs its own network namespace: %v", setupErr)
	}
}

func check() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root (unshare --net, ip and iptables inside the namespace)")
	}
	for _, cmd := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("netns: %s not found on PATH (hack/testbed-packages.sh installs it)", cmd)
		}
	}
	return nil
}

// reexec runs this very test binary under `unshare --net` and returns its exit code. The child dies
// with this process (Pdeathsig); SIGINT and SIGTERM are passed on so its cleanups run, and SIGQUIT
// (go test's signal to a test past its deadline) so the goroutine dump is the child's.
func reexec() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "netns: %v\n", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--", self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), Marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "netns: start unshare --net: %v\n", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "netns: %v\n", err)
		return 1
	}
}

// setup makes the fresh namespace usable. An address with a prefix on lo makes the whole prefix
// local (the kernel adds a `local` route for it, as for 127.0.0.0/8), so test/testbed can bind any
// host of Subnet without one address per server. There is no dummy interface: the kernel here may
// lack the module, and lo serves as well.
func setup() error {
	if err := sanity(); err != nil {
		return err
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", netip.PrefixFrom(HostAddr, Subnet.Bits()).String(), "dev", "lo"},
		{"route", "add", ServiceCIDR.String(), "dev", "lo", "src", HostAddr.String()},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// sanity refuses to reconfigure a namespace that already has an interface other than lo: the
// marker may have leaked into a test started on the host, and the host's network must never be
// changed.
func sanity() error {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("netns: ip link show: %v", err)
	}
	return onlyLo(string(out))
}

// onlyLo reads `ip -o link show`: one line per interface, "1: lo: <LOOPBACK> ...".
func onlyLo(out string) error {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.TrimSuffix(f[1], ":") != "lo" {
			return fmt.Errorf("netns: %s is set but this namespace has interfaces besides lo (%q): refusing to change it", Marker, line)
		}
	}
	return nil
}
