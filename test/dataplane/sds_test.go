package dataplane

import (
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

func (f *front) servedSerial() *big.Int {
	f.t.Helper()
	conn, err := tls.Dial("tcp", f.dp.Addr(), &tls.Config{RootCAs: f.pki.pool, ServerName: "front"})
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// eventually waits up to 3 s for the served serial to become want; stays: that it stays for 500 ms.
func (f *front) expectSerial(want *big.Int, stays bool, what string) {
	f.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	if stays {
		deadline = time.Now().Add(500 * time.Millisecond)
	}
	for {
		got := f.servedSerial()
		if stays && got.Cmp(want) != 0 {
			f.t.Fatalf("%s: served serial %v, want %v unchanged", what, got, want)
		}
		if !stays && got.Cmp(want) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if !stays {
				f.t.Fatalf("%s: served serial %v, want %v", what, got, want)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// moveIn writes a new pair beside dir and renames both files into it (key first, as an atomic
// writer would).
func (f *front) moveIn(dir string) *big.Int {
	stage := filepath.Join(filepath.Dir(dir), "stage")
	cert, key, sn := f.pki.issueFiles(f.t, stage, "front", []string{"front"}, false)
	if err := os.Rename(key, filepath.Join(dir, "tls.key")); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(cert, filepath.Join(dir, "tls.crt")); err != nil {
		f.t.Fatal(err)
	}
	return sn
}

// rewriteInPlace overwrites the pair's files without a move.
func (f *front) rewriteInPlace(dir string) *big.Int {
	c, k, x := f.pki.issue(f.t, "front", []string{"front"}, false)
	writeFile(f.t, filepath.Join(dir, "tls.key"), k)
	writeFile(f.t, filepath.Join(dir, "tls.crt"), c)
	return x.SerialNumber
}

// TestSDSFileWatch: an SDS certificate is reloaded only when a file is moved into the watched
// directory (watched_directory if set, else onto the file's own name in its directory); a rewrite
// in place is not seen.
func TestSDSFileWatch(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(map[bool]string{true: "watched_directory", false: "file watch"}[watched], func(t *testing.T) {
			a := newUpstream(t, "a")
			f := startFront(t, Delta, listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
			dir := filepath.Join(t.TempDir(), "certs")
			cert, key, first := f.pki.issueFiles(t, dir, "front", []string{"front"}, false)
			wd := ""
			if watched {
				wd = dir
			}
			f.base = []types.Resource{certSecret("front-cert", cert, key, wd)}
			f.update(listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
			f.expectSerial(first, false, "new secret")
			f.rewriteInPlace(dir)
			f.expectSerial(first, true, "in-place rewrite")
			moved := f.moveIn(dir)
			f.expectSerial(moved, false, "move into the directory")
		})
	}
}

// TestInlineCertificateNeverReloads: a certificate inline in the listener's TLS context (not SDS)
// is read once; moving new files into place changes nothing.
func TestInlineCertificateNeverReloads(t *testing.T) {
	a := newUpstream(t, "a")
	f := startFront(t, Delta, listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	dir := filepath.Join(t.TempDir(), "certs")
	cert, key, first := f.pki.issueFiles(t, dir, "front", []string{"front"}, false)
	l := listener(t, nil)
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: cert}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: key}},
	}}}}
	l.FilterChains[0].TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, ctx)}
	f.update(l, routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	f.expectSerial(first, false, "inline certificate")
	f.moveIn(dir)
	f.expectSerial(first, true, "move next to an inline certificate")
}
