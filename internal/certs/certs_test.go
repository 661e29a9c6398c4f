package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// serve accepts TLS connections with cfg and answers "ok" to each one whose handshake succeeded.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial reports the common name of the certificate served at addr, and whether the server accepted the
// client (it answers "ok" only after a handshake that verified the client certificate).
func dial(t *testing.T, addr string, roots []byte, client *tls.Certificate) (string, bool) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	cfg := &tls.Config{RootCAs: pool, ServerName: "skewgate", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, string(got) == "ok"
}

// TestRotation: a rotated pair is served after the next re-read; a broken one is refused, logged
// once, counted at every attempt, and the last good certificate stays. The same for the client CA,
// which is enforced throughout.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newCA(t, "ca-1"), newCA(t, "ca-2")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	writePair := func(ca *testCA, cn string) {
		c, k := ca.issue(t, cn, false)
		replace(t, certFile, c)
		replace(t, keyFile, k)
	}
	writePair(ca1, "a")
	replace(t, caFile, ca1.pem)
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, Logger: zap.New(core), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	addr := serve(t, r.ServerConfig())
	roots := append(append([]byte{}, ca1.pem...), ca2.pem...)
	client1, client2 := ca1.clientCert(t, "envoy-1"), ca2.clientCert(t, "envoy-2")
	count := func(m string, name string) float64 {
		t.Helper()
		if m == "reloads" {
			return testutil.ToFloat64(r.m.reloads.WithLabelValues(name))
		}
		return testutil.ToFloat64(r.m.failures.WithLabelValues(name))
	}
	expect := func(step, wantCN string, client *tls.Certificate, wantAccepted bool) {
		t.Helper()
		if cn, ok := dial(t, addr, roots, client); cn != wantCN || ok != wantAccepted {
			t.Fatalf("%s: served %q, client accepted %v; want %q, %v", step, cn, ok, wantCN, wantAccepted)
		}
	}
	expect("start", "a", &client1, true)
	expect("start, no client certificate", "a", nil, false)
	expect("start, client of another CA", "a", &client2, false)

	writePair(ca1, "b")
	r.sync(ctx)
	expect("good rotation", "b", &client1, true)
	if count("reloads", Serving) != 1 || count("failures", Serving) != 0 {
		t.Fatalf("after a good rotation: reloads %v, failures %v", count("reloads", Serving), count("failures", Serving))
	}

	replace(t, certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
	r.sync(ctx)
	r.sync(ctx)
	expect("broken rotation", "b", &client1, true)
	if got := count("failures", Serving); got != 2 {
		t.Fatalf("two re-reads of a broken certificate counted %v failures", got)
	}
	if n := logs.FilterMessage("certificate reload failed; serving the last good one").FilterField(zap.String("certificate", Serving)).Len(); n != 1 {
		t.Fatalf("a persisting failure was logged %d times, want once", n)
	}
	writePair(ca1, "c")
	r.sync(ctx)
	expect("repaired", "c", &client1, true)
	if logs.FilterMessage("certificate reload recovered").Len() != 1 {
		t.Fatal("the recovery was not logged")
	}

	replace(t, caFile, ca2.pem)
	r.sync(ctx)
	expect("client CA rotated, old client", "c", &client1, false)
	expect("client CA rotated, new client", "c", &client2, true)
	replace(t, caFile, []byte("not a CA"))
	r.sync(ctx)
	expect("broken client CA, client of the last good CA", "c", &client2, true)
	expect("broken client CA, client of the CA before", "c", &client1, false)
	if count("failures", ClientCA) != 1 || count("reloads", ClientCA) != 1 {
		t.Fatalf("client CA: failures %v, reloads %v; want 1, 1", count("failures", ClientCA), count("reloads", ClientCA))
	}
	// The counters are on the registry the caller gave.
	if n, err := testutil.GatherAndCount(reg, "skewgate_certificate_reload_failures_total"); err != nil || n != 2 {
		t.Fatalf("registry has %d failure series (%v), want 2", n, err)
	}
}

// TestRunPicksUpRotation: Run re-reads the files every Interval (not before) until its context ends.
func TestRunPicksUpRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, "a", false)
	replace(t, certFile, c)
	replace(t, keyFile, k)
	clk := clocktesting.NewFakeClock(time.Now())
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, Interval: DefaultInterval, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	addr := serve(t, r.ServerConfig())
	c, k = ca.issue(t, "b", false)
	replace(t, certFile, c)
	replace(t, keyFile, k)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatal("Run set no ticker")
	}
	clk.Step(DefaultInterval - time.Millisecond)
	if cn, ok := dial(t, addr, ca.pem, nil); cn != "a" || !ok {
		t.Fatalf("before the interval: served %q (handshake %v), want the old certificate a", cn, ok)
	}
	clk.Step(time.Millisecond)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cn, ok := dial(t, addr, ca.pem, nil)
		return cn == "b" && ok, nil
	})
	if err != nil {
		t.Fatalf("the rotated certificate was not served: %v", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}

func TestNewRefusesBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, "a", false)
	other, _ := ca.issue(t, "other", false)
	replace(t, certFile, c)
	replace(t, keyFile, k)
	replace(t, caFile, []byte("not a CA"))
	for name, cfg := range map[string]Config{
		"bad client CA":     {CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile},
		"missing client CA": {CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "none.crt")},
		"missing key":       {CertFile: certFile, KeyFile: filepath.Join(dir, "none.key")},
		"key of another":    {CertFile: writeTemp(t, dir, "other.crt", other), KeyFile: keyFile},
	} {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), filepath.Base(dir)) {
			t.Errorf("%s: accepted, or the error does not name the file: %v", name, err)
		}
	}
}

func writeTemp(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	replace(t, p, data)
	return p
}
