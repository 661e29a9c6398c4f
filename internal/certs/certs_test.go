package certs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

// TestReloadOnChange: rotated files take effect; a broken rotation keeps the last good certificate.
func TestReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	pki, err := testbed.NewPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := pki.IssueServing("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueServing("b")
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "live.crt"), filepath.Join(dir, "live.key")
	cp := func(src, dst string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cp(a.Cert, cert)
	cp(a.Key, key)
	r, err := NewReloader(cert, key, pki.CA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	first, pool := r.current()
	if pool == nil {
		t.Fatal("no client CA pool")
	}
	cp(b.Cert, cert)
	cp(b.Key, key)
	os.Chtimes(cert, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	r.checked = time.Time{} // skip the once-per-second throttle
	second, _ := r.current()
	if bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Fatal("rotated certificate not picked up")
	}
	os.WriteFile(cert, []byte("garbage"), 0o600)
	os.Chtimes(cert, time.Now().Add(2*time.Minute), time.Now().Add(2*time.Minute))
	r.checked = time.Time{}
	third, _ := r.current()
	if !bytes.Equal(second.Certificate[0], third.Certificate[0]) {
		t.Fatal("a broken rotation replaced the last good certificate")
	}
	if _, err := NewReloader(cert, key, ""); err == nil {
		t.Fatal("a broken certificate file was accepted at start")
	}
}
