package e2e

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

func install(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	// Write beside and rename, as cert-manager and kubelet's atomic writer do.
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// TestFrontCertificateRotation: a renewed front certificate, written over the old files, is served on
// new connections without restarting anything.
func TestFrontCertificateRotation(t *testing.T) {
	e := setup(t)
	tc, err := e.tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.f.Address, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	renewed, err := e.tb.PKI.IssueServing("front-renewed", net.ParseIP(e.f.Address[:len(e.f.Address)-len(":6443")]))
	if err != nil {
		t.Fatal(err)
	}
	install(t, renewed.Key, e.f.ServingCert.Key)
	install(t, renewed.Cert, e.f.ServingCert.Cert)
	deadline := time.Now().Add(30 * time.Second)
	for serial() == before {
		if time.Now().After(deadline) {
			t.Fatalf("the front still serves the old certificate 30 s after rotation (%s)", e.f.DataPlane)
		}
		time.Sleep(100 * time.Millisecond) // polling new connections
	}
	c := httpsClient(t, e.tb, nil)
	if code, _, err := do(t, c, http.MethodGet, e.f.URL+"/api/v1/namespaces/default/configmaps", testbed.AdminToken); err != nil || code != http.StatusOK {
		t.Errorf("after rotation: %d %v", code, err)
	}
}
