package dataplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// testPKI is a throw-away CA for the tests, with files in a temp directory.
type testPKI struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	pool   *x509.CertPool
}

var serial atomic.Int64

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: t.TempDir(), caCert: cert, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(cert)
	p.caFile = filepath.Join(p.dir, "ca.crt")
	writeFile(t, p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue returns a leaf certificate as PEM (cert, key) for the DNS names and IPs given.
func (p *testPKI) issue(t *testing.T, cn string, dns []string, client bool) (certPEM, keyPEM []byte, c *x509.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: dns,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	c, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), c
}

// issueFiles writes a pair into dir as tls.crt / tls.key and returns the paths and serial.
func (p *testPKI) issueFiles(t *testing.T, dir, cn string, dns []string, client bool) (cert, key string, sn *big.Int) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	c, k, x := p.issue(t, cn, dns, client)
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, cert, c)
	writeFile(t, key, k)
	return cert, key, x.SerialNumber
}

// tlsPair is a parsed pair for Go servers and clients.
func (p *testPKI) tlsPair(t *testing.T, cn string, dns []string, client bool) tls.Certificate {
	t.Helper()
	c, k, _ := p.issue(t, cn, dns, client)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
