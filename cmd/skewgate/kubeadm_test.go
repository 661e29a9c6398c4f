package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
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
	"k8s.io/client-go/util/keyutil"
)

// kubeadmNode is a temp dir with a kubeadm PKI (made with client-go's certutil) and the flags that
// point the command at it.
func kubeadmNode(t *testing.T) (root string, flags []string) {
	t.Helper()
	root = t.TempDir()
	pki := filepath.Join(root, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	// The two CAs, and each leaf issued by its CA for the usage kubeadm gives it (the install
	// verifies both).
	files := map[string][]byte{}
	issuers := map[string]*x509.Certificate{}
	keys := map[string]*ecdsa.PrivateKey{}
	for _, c := range []struct {
		name, ca string
		usage    x509.ExtKeyUsage
	}{{"ca", "", 0}, {"front-proxy-ca", "", 0}, {"apiserver", "ca", x509.ExtKeyUsageServerAuth}, {"front-proxy-client", "front-proxy-ca", x509.ExtKeyUsageClientAuth}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		var crt *x509.Certificate
		if c.ca == "" {
			crt, err = certutil.NewSelfSignedCACert(certutil.Config{CommonName: c.name}, key)
		} else {
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: c.name}, NotBefore: time.Now().Add(-time.Hour),
				NotAfter: time.Now().Add(365 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{c.usage}}
			var der []byte
			if der, err = x509.CreateCertificate(rand.Reader, tmpl, issuers[c.ca], &key.PublicKey, keys[c.ca]); err == nil {
				crt, err = x509.ParseCertificate(der)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		issuers[c.name], keys[c.name] = crt, key
		files[c.name+".crt"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: crt.Raw})
		files[c.name+".key"], _ = keyutil.MarshalPrivateKeyToPEM(key)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(pki, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, []string{"install", "--pki-dir", pki, "--manifests-dir", filepath.Join(root, "manifests"),
		"--config-dir", filepath.Join(root, "skewgate"), "--socket-dir", filepath.Join(root, "sockets"),
		"--node-name", "cp-1", "--apiserver-endpoint", "10.0.0.11:6443", "--skewgate-image", "registry.example/skewgate:v1"}
}

func runKubeadm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newKubeadmCommand(&out)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.Execute()
	return out.String(), err
}

func entries(t *testing.T, root string) int {
	t.Helper()
	n := 0
	filepath.Walk(root, func(string, os.FileInfo, error) error { n++; return nil })
	return n
}

func TestKubeadmInstallCommand(t *testing.T) {
	root, flags := kubeadmNode(t)
	before := entries(t, root)
	out, err := runKubeadm(t, append(flags, "--dry-run")...)
	if err != nil {
		t.Fatal(err)
	}
	if n := entries(t, root); n != before {
		t.Errorf("--dry-run wrote %d paths", n-before)
	}
	for _, want := range []string{"# would create " + filepath.Join(root, "manifests", "skewgate-envoy.yaml"),
		"--static-upstream=cp-1=10.0.0.11:6443", "(redacted)", `would issue a client certificate for user "skewgate"`} {
		if !strings.Contains(out, want) {
			t.Errorf("--dry-run output lacks %q", want)
		}
	}

	out, err = runKubeadm(t, flags...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "create "+filepath.Join(root, "skewgate", "skewgate", "skewgate.key")) || !strings.Contains(out, "apply -f "+filepath.Join(root, "skewgate", "rbac.yaml")) {
		t.Errorf("install output:\n%s", out)
	}
	out, err = runKubeadm(t, flags...)
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second run: %v\n%s", err, out)
	}
}

func TestKubeadmInstallBadInput(t *testing.T) {
	root, flags := kubeadmNode(t)
	before := entries(t, root)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--front-port", "6443"}, "--front-port 6443 is the apiserver's own port"},
		{[]string{"--apiserver-endpoint", "cp-1.example:6443"}, `--apiserver-endpoint "cp-1.example:6443"`},
		{[]string{"--pki-dir", filepath.Join(root, "nope")}, "--pki-dir"},
		{[]string{"--allowed-cidr", "10.0.0.0/99"}, "--allowed-cidr"},
		{[]string{"--skewgate-image", ""}, "--skewgate-image is required"},
	} {
		_, err := runKubeadm(t, append(append([]string{}, flags...), tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
	if n := entries(t, root); n != before {
		t.Errorf("refused runs wrote %d paths", n-before)
	}
}

// The printed RBAC is byte for byte what install writes.
func TestKubeadmRBACCommand(t *testing.T) {
	root, flags := kubeadmNode(t)
	if _, err := runKubeadm(t, flags...); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(filepath.Join(root, "skewgate", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runKubeadm(t, "rbac")
	if err != nil || out != string(written) || !strings.Contains(out, "kind: ClusterRoleBinding") {
		t.Errorf("rbac printed (%v):\n%s\nwant:\n%s", err, out, written)
	}
}

// With --kubernetes-endpoints, install writes the RBAC `rbac --kubernetes-endpoints` prints, and
// renders the mode's serve flags.
func TestKubeadmKubernetesEndpoints(t *testing.T) {
	root, flags := kubeadmNode(t)
	if _, err := runKubeadm(t, append(flags, "--kubernetes-endpoints", "--allowed-cidr=10.0.0.0/24")...); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(filepath.Join(root, "skewgate", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runKubeadm(t, "rbac", "--kubernetes-endpoints")
	if err != nil || out != string(written) || !strings.Contains(out, "skewgate:kubernetes-endpoints") {
		t.Errorf("rbac --kubernetes-endpoints printed (%v):\n%s\nwant:\n%s", err, out, written)
	}
	pod, err := os.ReadFile(filepath.Join(root, "manifests", "skewgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pod), "--kubernetes-endpoints\n") || !strings.Contains(string(pod), "--kubernetes-endpoint-address=") {
		t.Errorf("the skewgate pod does not run the mode:\n%s", pod)
	}
}
