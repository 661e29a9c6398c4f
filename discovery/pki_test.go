package discovery

import (
	"crypto/tls"
	"encoding/pem"
	"net"
	"testing"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// testCA is the CA of a test apiserver's serving certificate.
type testCA struct{ certPEM []byte }

// testPKI makes a CA and a serving certificate signed by it for kubernetes.default.svc (the name
// fetches verify) and 127.0.0.1, with client-go's own helper.
func testPKI(t testing.TB) (testCA, tls.Certificate) {
	t.Helper()
	chain, key, err := certutil.GenerateSelfSignedCertKey(ServerName, []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	leaf, rest := pem.Decode(chain)
	ca, _ := pem.Decode(rest)
	if leaf == nil || ca == nil {
		t.Fatal("GenerateSelfSignedCertKey returned no CA")
	}
	return testCA{certPEM: pem.EncodeToMemory(ca)}, cert
}

func restFor(t testing.TB, ca testCA) *rest.Config {
	return &rest.Config{BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPEM}}
}
