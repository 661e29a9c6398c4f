package testbed

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/test/netns"
)

// TestNoAnonymousFlag: ApiserverSpec.NoAnonymous reaches the apiserver's command line, and only
// that apiserver's.
func TestNoAnonymousFlag(t *testing.T) {
	tb := &Testbed{cfg: Config{BinDir: "bin"}, PKI: &PKI{}, EtcdURL: "http://127.0.0.1:2379"}
	ip := net.IPv4(127, 0, 0, 1)
	closed := tb.apiserverArgs(&apiserver{Apiserver: Apiserver{Name: "a", Version: NewVersion, IP: ip}, noAnonymous: true})
	open := tb.apiserverArgs(&apiserver{Apiserver: Apiserver{Name: "b", Version: NewVersion, IP: ip}})
	if !slices.Contains(closed, "--anonymous-auth=false") {
		t.Errorf("NoAnonymous: --anonymous-auth=false missing from %v", closed)
	}
	if slices.ContainsFunc(open, func(a string) bool { return len(a) > 16 && a[:16] == "--anonymous-auth" }) {
		t.Errorf("default: an --anonymous-auth flag in %v", open)
	}
}

// TestNetworkMode: with Config.Network the apiservers run the default lease endpoint reconciler
// (ExtraFlags may still choose one), without it they run none; a bad Network is refused.
func TestNetworkMode(t *testing.T) {
	ip := net.IPv4(198, 18, 0, 1)
	loop := &Testbed{cfg: Config{BinDir: "bin"}, PKI: &PKI{}}
	netw := &Testbed{cfg: Config{BinDir: "bin", Network: netip.MustParsePrefix("198.18.0.0/24")}, PKI: &PKI{}}
	none := "--endpoint-reconciler-type=none"
	if args := loop.apiserverArgs(&apiserver{Apiserver: Apiserver{Name: "a", Version: NewVersion, IP: ip}}); !slices.Contains(args, none) {
		t.Errorf("loopback: %s missing from %v", none, args)
	}
	if args := netw.apiserverArgs(&apiserver{Apiserver: Apiserver{Name: "a", Version: NewVersion, IP: ip}}); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--endpoint-reconciler-type") }) {
		t.Errorf("network: an --endpoint-reconciler-type flag in %v", args)
	}
	args := netw.apiserverArgs(&apiserver{Apiserver: Apiserver{Name: "a", Version: NewVersion, IP: ip}, extraFlags: []string{none}})
	if args[len(args)-1] != none {
		t.Errorf("network with ExtraFlags: want %s last, got %v", none, args)
	}
	for _, bad := range []string{"127.1.2.0/24", "169.254.3.0/24", "198.18.0.0/16", "2001:db8::/120", "0.0.0.0/24"} {
		if _, err := networkBase(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("Network %s accepted", bad)
		}
	}
	if b, err := networkBase(netip.MustParsePrefix("198.18.7.0/24")); err != nil || b != [3]byte{198, 18, 7} {
		t.Errorf("Network 198.18.7.0/24: %v %v", b, err)
	}
}

// TestServingSANs: every serving certificate names what an in-cluster client dials: the ClusterIP
// and every name of the `kubernetes` Service.
func TestServingSANs(t *testing.T) {
	p, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := p.IssueServing("s", net.IPv4(198, 18, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.CertsFromFile(pair.Cert)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{KubernetesServiceIP, "198.18.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		if err := certs[0].VerifyHostname(host); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}

// TestKubeProxyRefusesHostNamespace: kube-proxy rewrites the nat table of the namespace it runs in,
// so outside Network mode in the test's own namespace it is never started; a marker that leaked
// into a process netns.Main never set up is no namespace either.
func TestKubeProxyRefusesHostNamespace(t *testing.T) {
	for _, marker := range []string{"", "1"} {
		t.Setenv(netns.Marker, marker)
		for _, cfg := range []Config{{}, {Network: netip.MustParsePrefix("198.18.0.0/24")}} {
			tb := &Testbed{cfg: cfg, PKI: &PKI{}}
			if _, err := tb.StartKubeProxy(t.Context(), KubeProxyOptions{NodeIP: netip.MustParseAddr("198.18.0.254")}); err == nil || !strings.Contains(err.Error(), "network namespace") {
				t.Errorf("Network %v, marker %q, namespace never set up: want a refusal, got %v", cfg.Network, marker, err)
			}
		}
	}
}
