package kubeadm

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testNow is the fixed clock of every test.
var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// node is a fake kubeadm control-plane node under a temp dir: its PKI, laid out and issued as
// kubeadm does (phases/certs/certlist.go: apiserver.crt from ca.crt for server auth,
// front-proxy-client.crt from front-proxy-ca.crt for client auth, leaf NotBefore the CA's), and the
// files the pods mount. The cluster CA's key is RSA, as kubeadm makes it, in newRSANode; ECDSA
// (faster to generate) in newNode.
type node struct {
	root          string
	ca, proxyCA   *x509.Certificate
	key, proxyKey crypto.Signer
}

// The node's CAs are valid for ten years from a month before testNow.
var (
	caNotBefore = testNow.Add(-30 * 24 * time.Hour)
	caNotAfter  = caNotBefore.Add(10 * 365 * 24 * time.Hour)
)

func newNode(t *testing.T) *node { return makeNode(t, false) }

func newRSANode(t *testing.T) *node { return makeNode(t, true) }

func makeNode(t *testing.T, useRSA bool) *node {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	n := &node{root: root}
	n.ca, n.key = n.writeCA(t, "ca", "kubernetes", useRSA, caNotBefore, caNotAfter)
	n.proxyCA, n.proxyKey = n.writeCA(t, "front-proxy-ca", "front-proxy-ca", false, caNotBefore, caNotAfter)
	// Issued a day ago for a year, as kubeadm issued them then.
	for _, name := range []string{"apiserver", "front-proxy-client"} {
		n.nodeCert(t, name, testNow.Add(365*24*time.Hour-24*time.Hour))
	}
	return n
}

func newKey(t *testing.T, useRSA bool) crypto.Signer {
	t.Helper()
	var key crypto.Signer
	var err error
	if useRSA {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// writeCA makes a CA valid from notBefore to notAfter and writes it as pki/<name>.crt and .key.
func (n *node) writeCA(t *testing.T, name, cn string, useRSA bool, notBefore, notAfter time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key := newKey(t, useRSA)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(n.root, "pki", name+".crt"), pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), 0o644)
	write(t, filepath.Join(n.root, "pki", name+".key"), keyPEM, 0o600)
	return cert, key
}

// leaf describes a certificate of the node's PKI other than a CA.
type leaf struct {
	notBefore, notAfter time.Time
	usages              []x509.ExtKeyUsage
	// parent and signer issue it; nil parent: self-signed.
	parent *x509.Certificate
	signer crypto.Signer
}

// kubeadmLeaf is name (apiserver or front-proxy-client) as kubeadm issues it, expiring at notAfter.
func (n *node) kubeadmLeaf(name string, notAfter time.Time) leaf {
	if name == "front-proxy-client" {
		return leaf{notBefore: n.proxyCA.NotBefore, notAfter: notAfter, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, parent: n.proxyCA, signer: n.proxyKey}
	}
	return leaf{notBefore: n.ca.NotBefore, notAfter: notAfter, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, parent: n.ca, signer: n.key}
}

// nodeCert writes pki/<name>.crt and .key as kubeadm would have issued them, expiring at notAfter.
func (n *node) nodeCert(t *testing.T, name string, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	return n.writeLeaf(t, name, n.kubeadmLeaf(name, notAfter))
}

// writeLeaf issues l with a new key and writes it as pki/<name>.crt and .key.
func (n *node) writeLeaf(t *testing.T, name string, l leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	k := newKey(t, false)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: name},
		NotBefore: l.notBefore, NotAfter: l.notAfter, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: l.usages}
	parent, signer := l.parent, l.signer
	if parent == nil {
		parent, signer = tmpl, k
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, k.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ = keyutil.MarshalPrivateKeyToPEM(k)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})
	write(t, filepath.Join(n.root, "pki", name+".crt"), certPEM, 0o644)
	write(t, filepath.Join(n.root, "pki", name+".key"), keyPEM, 0o600)
	return certPEM, keyPEM
}

func (n *node) options() Options {
	return Options{
		NodeName: "cp-1", APIServerEndpoint: "10.0.0.11:6443",
		PKIDir: filepath.Join(n.root, "pki"), ManifestsDir: filepath.Join(n.root, "manifests"),
		ConfigDir: filepath.Join(n.root, "skewgate"), SocketDir: filepath.Join(n.root, "sockets"),
		KubeconfigDir: filepath.Join(n.root, "etc"),
		SkewgateImage: SkewgateImage("v0.9.0"), Now: func() time.Time { return testNow },
	}
}

// issue signs a client certificate with the node's CA (or with signer, when given) and writes it where
// the command keeps skewgate's.
func (n *node) issue(t *testing.T, subject pkix.Name, notAfter time.Time, otherCA bool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: subject, NotBefore: testNow.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	parent, signer := n.ca, any(n.key)
	if otherCA {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		parent, _ = certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kubernetes"}, k)
		signer = k
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := keyutil.MarshalPrivateKeyToPEM(key)
	dir := filepath.Join(n.root, "skewgate", "skewgate")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "skewgate.crt"), pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), 0o644)
	write(t, filepath.Join(dir, "skewgate.key"), keyPEM, 0o600)
}

func write(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshot records every path under root, without following a symlink: mode, modification time
// and content (a symlink's target).
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		data := ""
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			data = "-> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data = string(b)
		}
		out[p] = info.Mode().String() + " " + info.ModTime().String() + " " + data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// installed is a node the command has run on once.
func installed(t *testing.T) *node {
	t.Helper()
	n := newNode(t)
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}
	return n
}
