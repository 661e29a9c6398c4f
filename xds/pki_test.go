package xds

import (
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// testPKI is a CA and a certificate pair it signed (for 127.0.0.1 and kubernetes.default.svc), as
// files: what the real-Envoy tests need for every file the translation and the bootstrap name. Envoy
// checks that each loads and that pairs match; it verifies chains only on handshakes, which these
// tests do not make with these certificates.
type testPKI struct{ CA, Cert, Key string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	chain, key, err := certutil.GenerateSelfSignedCertKey("kubernetes.default.svc", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, rest := pem.Decode(chain)
	ca, _ := pem.Decode(rest)
	if leaf == nil || ca == nil {
		t.Fatal("GenerateSelfSignedCertKey returned no CA")
	}
	dir := t.TempDir()
	p := testPKI{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for path, data := range map[string][]byte{p.CA: pem.EncodeToMemory(ca), p.Cert: pem.EncodeToMemory(leaf), p.Key: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
