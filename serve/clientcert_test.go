package serve

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/internal/testpki"
)

// TestClientCertExpiry: the gauge follows the certificate file, a renewal included, and says 0 for
// no certificate.
func TestClientCertExpiry(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "skewgate.crt")
	write := func() int64 {
		_, certPEM, _ := testpki.SelfSigned(t, "skewgate")
		if err := os.WriteFile(file, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(certPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c.NotAfter.Unix()
	}
	want := write()
	g := clientCertExpiry(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: file}})
	if got := testutil.ToFloat64(g); int64(got) != want {
		t.Errorf("expiry %v, want %d", got, want)
	}
	if err := os.WriteFile(file, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(g); got != 0 {
		t.Errorf("expiry %v for a broken file, want 0", got)
	}
	os.Remove(file)
	if got := testutil.ToFloat64(g); got != 0 {
		t.Errorf("expiry %v with the file gone, want 0", got)
	}
	if got := testutil.ToFloat64(clientCertExpiry(&rest.Config{BearerToken: "t"})); got != 0 {
		t.Errorf("expiry %v for a token, want 0", got)
	}
}
