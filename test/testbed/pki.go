package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Well-known identities of every testbed. Tokens are static (--token-auth-file) and only valid in
// the testbed's own etcd.
const (
	AdminUser  = "admin"
	AdminToken = "admin-token-0123456789"
	// LowPrivUser has no RBAC bindings: everything but discovery and self-review is forbidden to it.
	LowPrivUser  = "alice"
	LowPrivToken = "alice-token-0123456789"
	// FrontProxyClientCN is the CN the apiservers accept X-Remote-* identity headers from.
	FrontProxyClientCN = "front-proxy-client"
	// ServingSNI is a name every apiserver serving certificate carries, as in a real cluster.
	ServingSNI = "kubernetes.default.svc"
)

// CertPair names a PEM certificate and its key on disk.
type CertPair struct{ Cert, Key string }

// PKI holds the paths of everything a testbed's apiservers and clients need.
type PKI struct {
	Dir string
	// CA signs serving certificates and client certificates (the cluster CA, --client-ca-file).
	CA CertPair
	// FrontProxyCA signs FrontProxyClient (--requestheader-client-ca-file).
	FrontProxyCA      CertPair
	FrontProxyClient  CertPair
	Admin             CertPair // CN=admin, O=system:masters
	LowPriv           CertPair // CN=alice, no groups
	ServiceAccountKey string
	ServiceAccountPub string
	TokenFile         string

	ca, frontProxyCA *Issuer
}

// Issuer is a CA that can sign more certificates for a test.
type Issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewPKI generates a fresh PKI under dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	var err error
	if p.ca, p.CA, err = p.newCA("ca", "skewgate-testbed-ca"); err != nil {
		return nil, err
	}
	if p.frontProxyCA, p.FrontProxyCA, err = p.newCA("front-proxy-ca", "skewgate-testbed-front-proxy-ca"); err != nil {
		return nil, err
	}
	if p.FrontProxyClient, err = p.IssueClient(p.frontProxyCA, "front-proxy-client", FrontProxyClientCN); err != nil {
		return nil, err
	}
	if p.Admin, err = p.IssueClient(p.ca, "admin", AdminUser, "system:masters"); err != nil {
		return nil, err
	}
	if p.LowPriv, err = p.IssueClient(p.ca, "alice", LowPrivUser); err != nil {
		return nil, err
	}
	if err := p.writeServiceAccountKeys(); err != nil {
		return nil, err
	}
	p.TokenFile = filepath.Join(dir, "tokens.csv")
	tokens := fmt.Sprintf("%s,%s,admin-uid,\"system:masters\"\n%s,%s,alice-uid\n", AdminToken, AdminUser, LowPrivToken, LowPrivUser)
	if err := os.WriteFile(p.TokenFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// ClusterCA returns the issuer of the cluster CA, to sign extra certificates in tests.
func (p *PKI) ClusterCA() *Issuer { return p.ca }

// FrontProxy returns the issuer of the front-proxy CA.
func (p *PKI) FrontProxy() *Issuer { return p.frontProxyCA }

func (p *PKI) newCA(name, cn string) (*Issuer, CertPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, CertPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, CertPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, CertPair{}, err
	}
	pair, err := p.write(name, der, key)
	return &Issuer{cert: cert, key: key}, pair, err
}

// CertOptions describe a leaf certificate.
type CertOptions struct {
	CommonName   string
	Organization []string
	// ExtraNames are further subject attributes, after CN and O (e.g. the user UID, OID
	// 1.3.6.1.4.1.57683.2, that 1.33+ apiservers read).
	ExtraNames []pkix.AttributeTypeAndValue
	DNSNames   []string
	IPs        []net.IP
	Server     bool
	NotBefore  time.Time // zero: an hour ago
	NotAfter   time.Time // zero: a year from now
}

// Issue signs a leaf certificate with ca and writes it as <name>.crt/<name>.key.
func (p *PKI) Issue(ca *Issuer, name string, o CertOptions) (CertPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertPair{}, err
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if o.Server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: o.Organization, ExtraNames: o.ExtraNames},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return CertPair{}, err
	}
	return p.write(name, der, key)
}

// IssueClient signs a client certificate for user with the given groups.
func (p *PKI) IssueClient(ca *Issuer, name, user string, groups ...string) (CertPair, error) {
	return p.Issue(ca, name, CertOptions{CommonName: user, Organization: groups})
}

// IssueServing signs a serving certificate valid for ip, loopback and the in-cluster names and
// ClusterIP, as kubeadm's apiserver.crt is (an in-cluster client dials https://10.96.0.1:443).
func (p *PKI) IssueServing(name string, ips ...net.IP) (CertPair, error) {
	return p.Issue(p.ca, name, CertOptions{
		CommonName: "kube-apiserver",
		DNSNames:   []string{ServingSNI, "kubernetes", "kubernetes.default", "kubernetes.default.svc.cluster.local", "localhost"},
		IPs:        append([]net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(KubernetesServiceIP).To4()}, ips...),
		Server:     true,
	})
}

func (p *PKI) write(name string, der []byte, key *ecdsa.PrivateKey) (CertPair, error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return CertPair{}, err
	}
	pair := CertPair{Cert: filepath.Join(p.Dir, name+".crt"), Key: filepath.Join(p.Dir, name+".key")}
	if err := os.WriteFile(pair.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return CertPair{}, err
	}
	if err := os.WriteFile(pair.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return CertPair{}, err
	}
	return pair, nil
}

func (p *PKI) writeServiceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	p.ServiceAccountKey = filepath.Join(p.Dir, "sa.key")
	p.ServiceAccountPub = filepath.Join(p.Dir, "sa.pub")
	if err := os.WriteFile(p.ServiceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}
