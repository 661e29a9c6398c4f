package kubeadm

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// After kubeadm renews the node's serving certificate (in place, as `kubeadm certs renew` and
// `kubeadm upgrade` do, for a year from then), running the command again replaces Envoy's copies of
// that pair, key first, by renames (so Envoy's watched directory sees them) and renews skewgate's own
// certificate with them, so it never outlives kubeadm's by expiring first: only skewgate's pod
// changes (the certificate hash annotation), never Envoy's.
func TestRerunAfterKubeadmRenewal(t *testing.T) {
	n := installed(t)
	copyKey := filepath.Join(n.root, "skewgate", "envoy", "apiserver.key")
	before, err := os.Stat(copyKey)
	if err != nil {
		t.Fatal(err)
	}
	// kubeadm renewed it 40 days after skewgate's certificate was issued, for a year, and the
	// command runs again then.
	later := testNow.Add(40 * 24 * time.Hour)
	_, keyPEM := n.nodeCert(t, "apiserver", later.Add(certValidity))
	o := n.options()
	o.Now = func() time.Time { return later }

	again, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Issued {
		t.Error("skewgate's certificate was kept although kubeadm renewed the node's after it")
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
	sg := filepath.Join(n.root, "skewgate", "skewgate")
	want := []string{"update " + filepath.Join(sg, "skewgate.key"), "update " + filepath.Join(sg, "skewgate.crt"),
		"update " + copyKey, "update " + filepath.Join(n.root, "skewgate", "envoy", "apiserver.crt"),
		"update " + filepath.Join(n.root, "manifests", "skewgate.yaml")}
	if !slices.Equal(changed, want) {
		t.Errorf("changes %v, want %v (keys first; Envoy's pod untouched)", changed, want)
	}
	crt, err := certutil.CertsFromFile(filepath.Join(sg, "skewgate.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := later.Add(certValidity); !crt[0].NotAfter.Equal(want) {
		t.Errorf("the renewed certificate expires %v, want %v (a year from the renewal, with kubeadm's)", crt[0].NotAfter, want)
	}
	got, _ := os.ReadFile(copyKey)
	after, _ := os.Stat(copyKey)
	if !bytes.Equal(got, keyPEM) || os.SameFile(before, after) || after.Mode().Perm() != 0o600 {
		t.Errorf("the key copy was not replaced by a new 0600 file (same file %v, mode %v)", os.SameFile(before, after), after.Mode())
	}
}
