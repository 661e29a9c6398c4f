package install

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

// node is a fake kubeadm control-plane node under a temp dir: its PKI, made with client-go's
// certutil, and the files the pods mount. The cluster CA's key is RSA, as kubeadm makes it, in
// newRSANode; ECDSA (faster to generate) in newNode.
type node struct {
	root string
	ca   *x509.Certificate
	key  crypto.Signer
}

func newNode(t *testing.T) *node { return makeNode(t, false) }

func newRSANode(t *testing.T) *node { return makeNode(t, true) }

func makeNode(t *testing.T, useRSA bool) *node {
	t.Helper()
	root := t.TempDir()
	pki := filepath.Join(root, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
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
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kubernetes"}, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(pki, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: ca.Raw}), 0o644)
	write(t, filepath.Join(pki, "ca.key"), keyPEM, 0o600)
	// The serving and front-proxy pairs are only copied and checked to match: self-signed will do,
	// valid for a year from a day ago, as kubeadm issued them then.
	n := &node{root: root, ca: ca, key: key}
	for _, name := range []string{"apiserver", "front-proxy-client"} {
		n.nodeCert(t, name, testNow.Add(365*24*time.Hour-24*time.Hour))
	}
	return n
}

// nodeCert writes pki/<name>.crt and .key as kubeadm would have issued them, expiring at notAfter.
func (n *node) nodeCert(t *testing.T, name string, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: name},
		NotBefore: notAfter.Add(-365 * 24 * time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
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

// snapshot records every file under root: content, mode and modification time.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		data := ""
		if !info.IsDir() {
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
