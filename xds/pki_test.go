package xds

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/skewgate/skewgate/internal/testpki"
)

// testPKI is a CA and a certificate pair it signed (for 127.0.0.1 and kubernetes.default.svc), as
// files: what the real-Envoy tests need for every file the translation and the bootstrap name. Envoy
// checks that each loads and that pairs match; it verifies chains only on handshakes, which these
// tests do not make with these certificates.
type testPKI struct{ CA, Cert, Key string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	ca, cert, key := testpki.SelfSigned(t, "kubernetes.default.svc", net.IPv4(127, 0, 0, 1))
	dir := t.TempDir()
	p := testPKI{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for path, data := range map[string][]byte{p.CA: ca, p.Cert: cert, p.Key: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
