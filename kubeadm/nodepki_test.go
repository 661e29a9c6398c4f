package kubeadm

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

const year = 365 * 24 * time.Hour

// Each bad node certificate is refused on a node the command ran on, and the rerun changes nothing.
// Before, apiserver.crt and front-proxy-client.crt were only checked to match their keys: a
// self-signed 50-year apiserver.crt was copied for Envoy to serve, and gave skewgate's client
// certificate a lifetime up to the CA's end.
func TestBadNodeCert(t *testing.T) {
	const server = "--pki-dir: apiserver.crt does not verify against the cluster CA ca.crt for server auth at 2026-06-01T12:00:00Z: "
	serverAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, n *node)
		want  string
	}{
		{"self-signed for 50 years", func(t *testing.T, n *node) {
			n.writeLeaf(t, "apiserver", leaf{notBefore: testNow.Add(-time.Hour), notAfter: testNow.Add(50 * year), usages: serverAuth})
		}, server + "x509: certificate signed by unknown authority"},
		{"another CA", func(t *testing.T, n *node) {
			other := newNode(t)
			n.writeLeaf(t, "apiserver", other.kubeadmLeaf("apiserver", testNow.Add(year)))
		}, server + "x509: certificate signed by unknown authority"},
		{"the front-proxy CA", func(t *testing.T, n *node) {
			n.writeLeaf(t, "apiserver", leaf{notBefore: caNotBefore, notAfter: testNow.Add(year), usages: serverAuth, parent: n.proxyCA, signer: n.proxyKey})
		}, server + "x509: certificate signed by unknown authority"},
		{"expired", func(t *testing.T, n *node) {
			n.nodeCert(t, "apiserver", testNow.Add(-time.Hour))
		}, server + "x509: certificate has expired or is not yet valid"},
		{"not yet valid", func(t *testing.T, n *node) {
			l := n.kubeadmLeaf("apiserver", testNow.Add(year))
			l.notBefore = testNow.Add(time.Hour)
			n.writeLeaf(t, "apiserver", l)
		}, server + "x509: certificate has expired or is not yet valid"},
		{"key mismatch", func(t *testing.T, n *node) {
			copyTo(t, filepath.Join(n.root, "pki", "front-proxy-client.key"), filepath.Join(n.root, "pki", "apiserver.key"), 0o600)
		}, "--pki-dir: apiserver.crt and apiserver.key: tls: private key does not match public key"},
		{"client auth only", func(t *testing.T, n *node) {
			l := n.kubeadmLeaf("apiserver", testNow.Add(year))
			l.usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			n.writeLeaf(t, "apiserver", l)
		}, "--pki-dir: apiserver.crt is not for server auth (kubeadm issues it for server auth only)"},
		{"no extended usage", func(t *testing.T, n *node) {
			l := n.kubeadmLeaf("apiserver", testNow.Add(year))
			l.usages = nil
			n.writeLeaf(t, "apiserver", l)
		}, "--pki-dir: apiserver.crt is not for server auth"},
		{"proxy from cluster CA", func(t *testing.T, n *node) {
			l := n.kubeadmLeaf("front-proxy-client", testNow.Add(year))
			l.parent, l.signer = n.ca, n.key
			n.writeLeaf(t, "front-proxy-client", l)
		}, "--pki-dir: front-proxy-client.crt does not verify against the front-proxy CA front-proxy-ca.crt for client auth at 2026-06-01T12:00:00Z: x509: certificate signed by unknown authority"},
		{"proxy server auth", func(t *testing.T, n *node) {
			l := n.kubeadmLeaf("front-proxy-client", testNow.Add(year))
			l.usages = serverAuth
			n.writeLeaf(t, "front-proxy-client", l)
		}, "--pki-dir: front-proxy-client.crt is not for client auth"},
		{"proxy expired", func(t *testing.T, n *node) {
			n.nodeCert(t, "front-proxy-client", testNow.Add(-time.Minute))
		}, "--pki-dir: front-proxy-client.crt does not verify against the front-proxy CA front-proxy-ca.crt for client auth at 2026-06-01T12:00:00Z: x509: certificate has expired"},
		{"no proxy CA", func(t *testing.T, n *node) {
			os.Remove(filepath.Join(n.root, "pki", "front-proxy-ca.crt"))
		}, "front-proxy-ca.crt: no such file or directory"},
		{"expired cluster CA", func(t *testing.T, n *node) {
			// apiserver.crt is from a second, valid CA of the bundle (a CA rotation); ca.key's expired.
			pki := filepath.Join(n.root, "pki")
			n.ca, n.key = n.writeCA(t, "ca", "kubernetes", false, caNotBefore, testNow.Add(-time.Hour))
			old, _ := os.ReadFile(filepath.Join(pki, "ca.crt"))
			other := newNode(t)
			n.writeLeaf(t, "apiserver", other.kubeadmLeaf("apiserver", testNow.Add(year)))
			fresh, _ := os.ReadFile(filepath.Join(other.root, "pki", "ca.crt"))
			write(t, filepath.Join(pki, "ca.crt"), append(old, fresh...), 0o644)
		}, "--pki-dir: the CA of ca.key in ca.crt is valid from 2026-05-02T12:00:00Z to 2026-06-01T11:00:00Z, not now (2026-06-01T12:00:00Z)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := installed(t)
			tc.plant(t, n)
			refused(t, n, tc.want)
		})
	}
}

// clientCertOf renders for n at now and returns skewgate's certificate in the plan.
func clientCertOf(t *testing.T, n *node, now time.Time) (*x509.Certificate, *Plan) {
	t.Helper()
	o := n.options()
	o.Now = func() time.Time { return now }
	plan, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plan.Files {
		if strings.HasSuffix(f.Path, "/skewgate.crt") {
			certs, err := certutil.ParseCertsPEM(f.Data)
			if err != nil {
				t.Fatal(err)
			}
			return certs[0], plan
		}
	}
	t.Fatal("no client certificate in the plan")
	return nil, nil
}

// skewgate's certificate lives at most a year (kubeadm's leaf certificates' validity) and never
// beyond the CA, however long the node's apiserver.crt lives.
func TestClientCertificateLifetimeIsCapped(t *testing.T) {
	for _, tc := range []struct {
		name            string
		serving, caLeft time.Duration
		want            time.Duration
	}{
		// kubeadm's certificateValidityPeriod set to 50 years (the CA's signature, so it verifies):
		// before the cap, skewgate's certificate lived until the CA's end, 9 years 11 months.
		{"50-year apiserver.crt", 50 * year, 10*year - 30*24*time.Hour, year},
		{"2-year apiserver.crt", 2 * year, 10*year - 30*24*time.Hour, year},
		{"CA ends in 100 days", 90 * 24 * time.Hour, 100 * 24 * time.Hour, 100 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			if tc.caLeft != caNotAfter.Sub(testNow) {
				n.ca, n.key = n.writeCA(t, "ca", "kubernetes", false, caNotBefore, testNow.Add(tc.caLeft))
			}
			n.nodeCert(t, "apiserver", testNow.Add(tc.serving))
			c, plan := clientCertOf(t, n, testNow)
			if !plan.Issued || !c.NotAfter.Equal(testNow.Add(tc.want)) {
				t.Errorf("issued %v, expires in %v, want %v", plan.Issued, c.NotAfter.Sub(testNow), tc.want)
			}
			// Running again right away keeps it: the node's certificate outliving it is no reason
			// to issue one that could not live longer.
			if _, err := Apply(plan, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, again := clientCertOf(t, n, testNow.Add(time.Minute)); again.Issued {
				t.Error("a rerun a minute later issued another certificate")
			}
		})
	}
}

// An apiserver.crt issued by an intermediate CA, the intermediate following the leaf in the file (as
// kubeadm reads a chain, pkiutil.TryLoadCertChainFromDisk), verifies against ca.crt.
func TestServingCertificateWithIntermediate(t *testing.T) {
	n := newNode(t)
	key := newKey(t, false)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "intermediate"}, NotBefore: caNotBefore, NotAfter: caNotAfter,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, n.ca, key.Public(), n.key)
	if err != nil {
		t.Fatal(err)
	}
	intermediate, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _ := n.writeLeaf(t, "apiserver", leaf{notBefore: caNotBefore, notAfter: testNow.Add(year),
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, parent: intermediate, signer: key})
	chain := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})...)
	write(t, filepath.Join(n.root, "pki", "apiserver.crt"), chain, 0o644)
	if _, err := Render(n.options()); err != nil {
		t.Errorf("a chain through an intermediate of ca.crt: %v", err)
	}
	// Without the intermediate it does not verify.
	write(t, filepath.Join(n.root, "pki", "apiserver.crt"), certPEM, 0o644)
	if _, err := Render(n.options()); err == nil || !strings.Contains(err.Error(), "signed by unknown authority") {
		t.Errorf("a leaf of an intermediate not in the file: %v", err)
	}
}
