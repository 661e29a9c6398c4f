package discovery

import (
	"crypto/tls"
	"net"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/internal/testpki"
)

// testCA is the CA of a test apiserver's serving certificate.
type testCA struct{ certPEM []byte }

// testPKI makes a CA and a serving certificate signed by it for kubernetes.default.svc (the name
// fetches verify) and 127.0.0.1.
func testPKI(t testing.TB) (testCA, tls.Certificate) {
	t.Helper()
	ca, certPEM, key := testpki.SelfSigned(t, ServerName, net.IPv4(127, 0, 0, 1))
	cert, err := tls.X509KeyPair(certPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{certPEM: ca}, cert
}

func restFor(t testing.TB, ca testCA) *rest.Config {
	return &rest.Config{BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPEM}}
}
