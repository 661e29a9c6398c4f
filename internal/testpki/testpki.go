// Package testpki makes certificates for unit tests with client-go's own helper, so that library
// unit tests need no testbed.
package testpki

import (
	"encoding/pem"
	"net"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// SelfSigned returns a CA and a serving certificate it signed for host and ips, with its key, all PEM.
func SelfSigned(t testing.TB, host string, ips ...net.IP) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	chain, key, err := certutil.GenerateSelfSignedCertKey(host, ips, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	leaf, rest := pem.Decode(chain)
	ca, _ := pem.Decode(rest)
	if leaf == nil || ca == nil {
		t.Fatal("GenerateSelfSignedCertKey returned no CA")
	}
	return pem.EncodeToMemory(ca), pem.EncodeToMemory(leaf), key
}
