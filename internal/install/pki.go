package install

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// User is the identity of skewgate's client certificate: CN=skewgate and no Organization, so it is
// in no group beyond system:authenticated and holds exactly the RBAC bound to it.
const User = "skewgate"

const (
	// certValidity matches kubeadm's leaf certificates (one year).
	certValidity = 365 * 24 * time.Hour
	// renewBefore: a certificate with less than half its life left is re-issued when the command
	// runs again, so a run every six months (or after every kubeadm upgrade, which is when the
	// runbook runs it) keeps it valid.
	renewBefore = certValidity / 2
)

// ca is the cluster CA read from the node's PKI.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func readCA(pkiDir string) (*ca, error) {
	certs, err := certutil.CertsFromFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("--pki-dir: cluster CA: %w", err)
	}
	key, err := keyutil.PrivateKeyFromFile(filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("--pki-dir: cluster CA key (run this on a control-plane node, as root): %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("--pki-dir: ca.key is not a signing key")
	}
	// During a CA rotation ca.crt is a bundle of the old and the new CA: use the one of ca.key.
	for _, c := range certs {
		if publicKeysEqual(signer.Public(), c.PublicKey) {
			if !c.IsCA {
				return nil, fmt.Errorf("--pki-dir: the certificate of ca.key in ca.crt is not a CA certificate")
			}
			return &ca{cert: c, key: signer}, nil
		}
	}
	return nil, fmt.Errorf("--pki-dir: ca.key belongs to no certificate in ca.crt")
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// clientCert returns skewgate's certificate and key, PEM: the existing pair when it is still good
// (same subject, signed by this CA, for client auth, key matching, not expiring within renewBefore,
// nor a day or more before the node's apiserver certificate), a new one otherwise. issued tells which.
//
// nodeExpiry is when the node's apiserver certificate expires: kubeadm renews its certificates for a
// year on every `kubeadm upgrade` and `kubeadm certs renew` (their NotBefore is the CA's, their
// NotAfter a year from the renewal), and the runbook runs this command after each, so skewgate's
// certificate is renewed with them and never expires on its own while kubeadm's are fresh.
func (c *ca) clientCert(certFile, keyFile string, now, nodeExpiry time.Time) (certPEM, keyPEM []byte, issued bool, err error) {
	if certPEM, keyPEM, ok := c.existing(certFile, keyFile, now, nodeExpiry); ok {
		return certPEM, keyPEM, false, nil
	}
	keyPEM, err = keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, false, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, false, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: User},
		NotBefore:    now.Add(-5 * time.Minute).UTC(),
		// As long as the node's own certificates (kubeadm's certificateValidityPeriod may be longer
		// than a year), at least a year.
		NotAfter:    maxTime(now.Add(certValidity), nodeExpiry).UTC(),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.(crypto.Signer).Public(), c.key)
	if err != nil {
		return nil, nil, false, fmt.Errorf("issuing the client certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), keyPEM, true, nil
}

func (c *ca) existing(certFile, keyFile string, now, nodeExpiry time.Time) (certPEM, keyPEM []byte, ok bool) {
	certPEM, err1 := os.ReadFile(certFile)
	keyPEM, err2 := os.ReadFile(keyFile)
	if err1 != nil || err2 != nil {
		return nil, nil, false
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, nil, false
	}
	cert := certs[0]
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, false
	}
	signer, isSigner := key.(crypto.Signer)
	good := isSigner && publicKeysEqual(signer.Public(), cert.PublicKey) &&
		cert.CheckSignatureFrom(c.cert) == nil &&
		cert.Subject.CommonName == User && len(cert.Subject.Organization) == 0 &&
		len(cert.ExtKeyUsage) == 1 && cert.ExtKeyUsage[0] == x509.ExtKeyUsageClientAuth &&
		!now.Before(cert.NotBefore) && now.Before(cert.NotAfter) &&
		// kubeadm renewed the node's certificates since: renew with them.
		!cert.NotAfter.Add(24*time.Hour).Before(nodeExpiry) &&
		// Renew late in life, unless the CA itself ends sooner: a new one could not last longer.
		(now.Add(renewBefore).Before(cert.NotAfter) || !cert.NotAfter.Before(c.cert.NotAfter))
	return certPEM, keyPEM, good
}

// kubeconfig points skewgate at the local apiserver with its client certificate, by file: the
// kubeconfig holds no secret and stays byte-identical when the certificate is renewed.
func kubeconfig(server, caFile, certFile, keyFile string) ([]byte, error) {
	const name = "local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[User] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: User}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}

// nodeFiles are the kubeadm files Envoy serves with, read from the node's PKI directory.
type nodeFiles struct {
	ca, servingCert, servingKey, proxyCert, proxyKey []byte
	// servingExpiry is the NotAfter of apiserver.crt: a year after kubeadm last renewed it.
	servingExpiry time.Time
}

// readNodeFiles reads them and checks that each key belongs to its certificate: a node without them
// is not a kubeadm control-plane node, or --pki-dir is wrong.
func readNodeFiles(pkiDir string) (*nodeFiles, error) {
	var errs []error
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(pkiDir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("--pki-dir: %w", err))
		}
		return b
	}
	n := &nodeFiles{ca: read("ca.crt"), servingCert: read("apiserver.crt"), servingKey: read("apiserver.key"),
		proxyCert: read("front-proxy-client.crt"), proxyKey: read("front-proxy-client.key")}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for name, pair := range map[string][2][]byte{"apiserver": {n.servingCert, n.servingKey}, "front-proxy-client": {n.proxyCert, n.proxyKey}} {
		kp, err := tls.X509KeyPair(pair[0], pair[1])
		if err != nil {
			errs = append(errs, fmt.Errorf("--pki-dir: %s.crt and %s.key: %w", name, name, err))
			continue
		}
		if name == "apiserver" && kp.Leaf != nil {
			n.servingExpiry = kp.Leaf.NotAfter
		}
	}
	return n, errors.Join(errs...)
}

// redact replaces the body of every PEM private key in b.
func redact(b []byte) []byte {
	var out bytes.Buffer
	for {
		blk, rest := pem.Decode(b)
		if blk == nil {
			out.Write(b)
			return out.Bytes()
		}
		fmt.Fprintf(&out, "-----BEGIN %s-----\n(redacted)\n-----END %s-----\n", blk.Type, blk.Type)
		b = rest
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
