package install

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// After kubeadm renews the node's serving certificate (in place, as `kubeadm certs renew` and
// `kubeadm upgrade` do), running the command again replaces exactly Envoy's copies of that pair, key
// first, by renames (so Envoy's watched directory sees them), and leaves the static pods alone: no
// pod restarts.
func TestRerunAfterKubeadmRenewal(t *testing.T) {
	n := newNode(t)
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}
	copyKey := filepath.Join(n.root, "skewgate", "envoy", "apiserver.key")
	before, err := os.Stat(copyKey)
	if err != nil {
		t.Fatal(err)
	}

	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	crt, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kube-apiserver"}, k)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := keyutil.MarshalPrivateKeyToPEM(k)
	crtPEM := pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: crt.Raw})
	write(t, filepath.Join(n.root, "pki", "apiserver.crt"), crtPEM, 0o644)
	write(t, filepath.Join(n.root, "pki", "apiserver.key"), keyPEM, 0o600)

	again, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Apply(again, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, c := range changes {
		if c.Action != "unchanged" {
			changed = append(changed, c.Action+" "+c.Path)
		}
	}
	want := []string{"update " + copyKey, "update " + filepath.Join(n.root, "skewgate", "envoy", "apiserver.crt")}
	if len(changed) != 2 || changed[0] != want[0] || changed[1] != want[1] {
		t.Errorf("changes %v, want %v (key first, nothing else)", changed, want)
	}
	got, _ := os.ReadFile(copyKey)
	after, _ := os.Stat(copyKey)
	if !bytes.Equal(got, keyPEM) || os.SameFile(before, after) || after.Mode().Perm() != 0o600 {
		t.Errorf("the key copy was not replaced by a new 0600 file (same file %v, mode %v)", os.SameFile(before, after), after.Mode())
	}
}
