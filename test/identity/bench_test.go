package identity

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkIdentityStep is the identity step per request in the test data plane's Lua VM: a
// kubelet's certificate (CN=system:node:<name>, O=system:nodes) through xds/identity.lua. The VM
// is gopher-lua, an interpreter in Go, not Envoy's LuaJIT: an upper-bound-ish indication of the
// script's cost, not Envoy's number.
func BenchmarkIdentityStep(b *testing.B) {
	h := newHarness(b, true)
	cert := h.ca.issue(b, subject(b, rdn{{oidO, "system:nodes"}}, rdn{{oidCN, "system:node:worker-1"}}), nil)
	chains, err := cert.Verify(x509.VerifyOptions{Roots: h.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		b.Fatal(err)
	}
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: chains}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodGet, "https://front/api/v1/nodes/worker-1", nil)
		r.TLS = cs
		if h.lua.OnRequest(httptest.NewRecorder(), r) || r.Header.Get("X-Remote-User") != "system:node:worker-1" {
			b.Fatalf("no identity: %v", r.Header)
		}
	}
}

// BenchmarkRequestOnly is the same request without the Lua step, to subtract.
func BenchmarkRequestOnly(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodGet, "https://front/api/v1/nodes/worker-1", nil)
		_ = httptest.NewRecorder()
		r.Header.Add("x-remote-user", "system:node:worker-1")
	}
}
