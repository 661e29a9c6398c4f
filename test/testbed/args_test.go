package testbed

import (
	"net"
	"slices"
	"testing"
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
