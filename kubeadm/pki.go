package kubeadm

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
	"slices"
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
	// certValidity is the longest a certificate this command issues lives: kubeadm's leaf
	// certificates' (one year, kubeadm's CertificateValidity), never beyond the CA's NotAfter.
	certValidity = 365 * 24 * time.Hour
	// renewBefore: a certificate with less than half its life left is re-issued when the command
	// runs again, so a run every six months (or after every kubeadm upgrade, which is when the
	// runbook runs it) keeps it valid.
	renewBefore = certValidity / 2
	// maxCertFile bounds what is read of skewgate's own certificate or key.
	maxCertFile = 64 << 10
)

// ca is the cluster CA read from the node's PKI.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func readCA(pkiDir string, now time.Time) (*ca, error) {
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
			if now.Before(c.NotBefore) || now.After(c.NotAfter) {
				return nil, fmt.Errorf("--pki-dir: the CA of ca.key in ca.crt is valid from %s to %s, not now (%s)",
					c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
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

// notAfter is when a certificate issued now expires: a year from now (kubeadm's own leaf
// certificates' validity), or when the CA does if that is sooner. It never depends on the node's
// certificates, which a compromised or mistaken file could make live for decades.
func (c *ca) notAfter(now time.Time) time.Time {
	end := now.Add(certValidity)
	if end.After(c.cert.NotAfter) {
		end = c.cert.NotAfter
	}
	return end.UTC()
}

// clientCert returns skewgate's certificate and key, PEM, from configDir/skewgate: the existing
// pair when it is still good (see existing), a new one otherwise. issued tells which.
//
// nodeExpiry is when the node's apiserver certificate expires: kubeadm renews its certificates for a
// year on every `kubeadm upgrade` and `kubeadm certs renew` (their NotBefore is the CA's, their
// NotAfter a year from the renewal), and the runbook runs this command after each, so skewgate's
// certificate is renewed with them and never expires on its own while kubeadm's are fresh.
func (c *ca) clientCert(configDir string, now, nodeExpiry time.Time) (certPEM, keyPEM []byte, issued bool, err error) {
	certPEM, keyPEM, ok, err := c.existing(configDir, now, nodeExpiry)
	if err != nil || ok {
		return certPEM, keyPEM, false, err
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
		NotAfter:     c.notAfter(now),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.(crypto.Signer).Public(), c.key)
	if err != nil {
		return nil, nil, false, fmt.Errorf("issuing the client certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), keyPEM, true, nil
}

// existing reads skewgate's certificate and key the way Apply would write them (no symlink followed:
// one is refused, err) and tells whether they are still good: same subject, signed by this CA, for
// client auth, key matching, valid now and not expiring within renewBefore, not outliving what this
// command issues now (an older release took the lifetime from apiserver.crt), and not older than
// kubeadm's last renewal of the node's certificates.
func (c *ca) existing(configDir string, now, nodeExpiry time.Time) (certPEM, keyPEM []byte, ok bool, err error) {
	certPEM, err = readOwned(configDir, maxCertFile, "skewgate", "skewgate.crt")
	if err == nil {
		keyPEM, err = readOwned(configDir, maxCertFile, "skewgate", "skewgate.key")
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, nil, false, nil
	}
	cert := certs[0]
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, false, nil
	}
	limit := c.notAfter(now)
	signer, isSigner := key.(crypto.Signer)
	good := isSigner && publicKeysEqual(signer.Public(), cert.PublicKey) &&
		cert.CheckSignatureFrom(c.cert) == nil &&
		cert.Subject.CommonName == User && len(cert.Subject.Organization) == 0 &&
		len(cert.ExtKeyUsage) == 1 && cert.ExtKeyUsage[0] == x509.ExtKeyUsageClientAuth &&
		!now.Before(cert.NotBefore) && now.Before(cert.NotAfter) &&
		// Never longer than one issued now (a day of slack for a clock stepped back).
		!cert.NotAfter.After(limit.Add(24*time.Hour)) &&
		// kubeadm renewed the node's certificates since (they now outlive this one by more than a
		// day) and a new one would live as long: renew with them. A node certificate that outlives
		// anything this command issues (kubeadm's certificateValidityPeriod above a year) leaves
		// renewal to the half-life rule below.
		!(cert.NotAfter.Add(24*time.Hour).Before(nodeExpiry) && !limit.Add(24*time.Hour).Before(nodeExpiry)) &&
		// Renew late in life, unless the CA itself ends sooner: a new one could not last longer.
		(now.Add(renewBefore).Before(cert.NotAfter) || !cert.NotAfter.Before(c.cert.NotAfter))
	return certPEM, keyPEM, good, nil
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

// readNodeFiles reads them and checks each pair as kubeadm issues it (phases/certs/certlist.go):
// apiserver.crt from a CA of ca.crt for server auth, front-proxy-client.crt from front-proxy-ca.crt
// for client auth, each valid now and matching its key. A node without them is not a kubeadm
// control-plane node, or --pki-dir is wrong; a pair that does not verify would have Envoy present a
// certificate clients refuse, or send identity headers the apiservers do not accept.
func readNodeFiles(pkiDir string, now time.Time) (*nodeFiles, error) {
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
	proxyCA := read("front-proxy-ca.crt")
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	serving, err := verifyPair("apiserver", n.servingCert, n.servingKey, "cluster CA ca.crt", n.ca, x509.ExtKeyUsageServerAuth, now)
	if err != nil {
		errs = append(errs, err)
	} else {
		n.servingExpiry = serving.NotAfter
	}
	if _, err := verifyPair("front-proxy-client", n.proxyCert, n.proxyKey, "front-proxy CA front-proxy-ca.crt", proxyCA, x509.ExtKeyUsageClientAuth, now); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// verifyPair checks that name.crt (its leaf first, then any intermediates) matches name.key, lists
// usage as kubeadm issues it, and chains at now to a CA of caPEM (ca names the file) for that usage.
func verifyPair(name string, certPEM, keyPEM []byte, ca string, caPEM []byte, usage x509.ExtKeyUsage, now time.Time) (*x509.Certificate, error) {
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--pki-dir: %s.crt and %s.key: %w", name, name, err)
	}
	leaf := kp.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(kp.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--pki-dir: %s.crt: %w", name, err)
		}
	}
	what := map[x509.ExtKeyUsage]string{x509.ExtKeyUsageServerAuth: "server auth", x509.ExtKeyUsageClientAuth: "client auth"}[usage]
	if !slices.Contains(leaf.ExtKeyUsage, usage) {
		return nil, fmt.Errorf("--pki-dir: %s.crt is not for %s (kubeadm issues it for %s only)", name, what, what)
	}
	roots, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("--pki-dir: %s: %w", ca, err)
	}
	opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, r := range roots {
		opts.Roots.AddCert(r)
	}
	for _, der := range kp.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("--pki-dir: %s.crt: %w", name, err)
		}
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("--pki-dir: %s.crt does not verify against the %s for %s at %s: %w", name, ca, what, now.UTC().Format(time.RFC3339), err)
	}
	return leaf, nil
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
