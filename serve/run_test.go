package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/serve/options"
)

// startServer starts a Server on loopback listeners with a kubeconfig whose apiserver is unreachable:
// the components run, nothing is discovered.
func startServer(t *testing.T, ctx context.Context, mut ...func(*options.Options)) (*Server, <-chan error, Listeners) {
	t.Helper()
	dir := t.TempDir()
	ca, _, err := cert.GenerateSelfSignedCertKey("localhost", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	caFile, kc := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", certificate-authority: `+caFile+`}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := options.NewOptions()
	o.Kubeconfig = kc
	o.StaticUpstreams = []string{"cp-1=127.0.0.1:1"}
	o.Envoy.ServingCertFile, o.Envoy.ServingKeyFile = "/pki/front.crt", "/pki/front.key"
	o.Envoy.UpstreamCAFile, o.Envoy.FrontProxyCertFile, o.Envoy.FrontProxyKeyFile = "/pki/ca.crt", "/pki/fp.crt", "/pki/fp.key"
	var lis Listeners
	for _, l := range []*net.Listener{&lis.XDS, &lis.ExtProc, &lis.HTTP} {
		if *l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	o.XDSListen, o.ExtProcListen, o.HTTPListen = lis.XDS.Addr().String(), lis.ExtProc.Addr().String(), lis.HTTP.Addr().String()
	o.GRPCPlaintextLoopback = true // the test's clients dial loopback TCP
	for _, m := range mut {
		m(o)
	}
	// A mut that moves a gRPC listener to a unix socket has Start open it.
	for _, l := range []struct {
		lis  *net.Listener
		addr string
	}{{&lis.XDS, o.XDSListen}, {&lis.ExtProc, o.ExtProcListen}} {
		if strings.HasPrefix(l.addr, "unix://") {
			(*l.lis).Close()
			*l.lis = nil
		}
	}
	o.Complete()
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	srv, done, err := Start(ctx, o, lis, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return srv, done, lis
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestDeadComponentEndsStart: when the xDS listener dies under its gRPC server, Start's channel
// reports it and every other component stops (the HTTP listener closes), so `serve` exits non-zero.
func TestDeadComponentEndsStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, done, lis := startServer(t, ctx)
	if resp, err := http.Get("http://" + srv.HTTPAddr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz before: %v %v", resp, err)
	}
	lis.XDS.Close()
	select {
	case err := <-done:
		if err == nil || !strings.HasPrefix(err.Error(), "xds gRPC: ") {
			t.Fatalf("Start ended with %v, want the xds gRPC failure first", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the xDS gRPC server died and the other components kept running")
	}
	if _, err := net.DialTimeout("tcp", srv.HTTPAddr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialing the HTTP listener after Start ended: %v, want connection refused (nothing listens)", err)
	}
}

// TestShutdownIsClean: ending ctx stops every component without an error. Start leaves the
// process's settings (the GC percent) alone.
func TestShutdownIsClean(t *testing.T) {
	before := debug.SetGCPercent(137)
	defer debug.SetGCPercent(before)
	ctx, cancel := context.WithCancel(context.Background())
	_, done, _ := startServer(t, ctx)
	if now := debug.SetGCPercent(137); now != 137 {
		t.Errorf("Start set the GC percent to %d", now)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a requested shutdown ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown did not finish")
	}
}

// TestHealthzNamesDeadComponent: between a component's death and the end of the others, /healthz
// answers 503 naming it; a component that returns without an error before shutdown is dead too.
func TestHealthzNamesDeadComponent(t *testing.T) {
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"failed":  {errors.New("informer died"), "discovery: informer died"},
		"stopped": {nil, "discovery: stopped on its own"},
	} {
		g := newGroup(context.Background())
		release, stopped := make(chan struct{}), make(chan struct{})
		g.run("discovery", func(context.Context) error { <-release; return c.err })
		g.run("http", func(ctx context.Context) error { <-ctx.Done(); <-stopped; return nil })
		h := (&Server{Registry: prometheus.NewRegistry(), components: g}).httpHandler(false)
		if code, body := get(t, h, "/healthz"); code != http.StatusOK {
			t.Fatalf("%s: /healthz while all run: %d %s", name, code, body)
		}
		close(release)
		<-g.ctx.Done()
		if code, body := get(t, h, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, c.want) {
			t.Errorf("%s: /healthz after the death: %d %q, want 503 naming %q", name, code, body, c.want)
		}
		close(stopped)
		if err := g.wait(); err == nil || err.Error() != c.want {
			t.Errorf("%s: group ended with %v, want %q", name, err, c.want)
		}
	}
}

// TestPprofOnlyWhenAsked: /debug/pprof is served only with --pprof (which Validate allows only on a
// loopback --http-listen).
func TestPprofOnlyWhenAsked(t *testing.T) {
	s := &Server{Registry: prometheus.NewRegistry(), components: newGroup(context.Background())}
	if code, _ := get(t, s.httpHandler(false), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without --pprof /debug/pprof/ answered %d", code)
	}
	if code, _ := get(t, s.httpHandler(true), "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("with --pprof /debug/pprof/ answered %d", code)
	}
}

// TestGRPCCertificateReload: with --grpc-cert-file the gRPC listeners present the reloaded
// certificate, require a client certificate, and the reload counters are on the app's registry.
func TestGRPCCertificateReload(t *testing.T) {
	dir := t.TempDir()
	crt, key, err := cert.GenerateSelfSignedCertKey("skewgate", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: crt, keyFile: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, _, _ := startServer(t, ctx, func(o *options.Options) {
		o.GRPCCertFile, o.GRPCKeyFile, o.GRPCClientCAFile = certFile, keyFile, certFile
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(crt)
	c, err := tls.Dial("tcp", srv.XDSAddr, &tls.Config{RootCAs: pool, ServerName: "skewgate", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS to the xDS listener: %v", err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("a client without a certificate got %v, want the certificate required alert", err)
	}
	c.Close()
	for _, m := range []string{"skewgate_certificate_reloads_total", "skewgate_certificate_reload_failures_total"} {
		if n, err := testutil.GatherAndCount(srv.Registry, m); err != nil || n != 2 {
			t.Errorf("%s: %d series on the app registry (%v), want 2", m, n, err)
		}
	}
}

// TestKubernetesEndpointsComponent: with --kubernetes-endpoints the writer runs as a component and
// stops with the others (its removal bounded by its shutdown timeout, here against an apiserver that
// is not there); without it, no component of that name runs.
func TestKubernetesEndpointsComponent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, done, _ := startServer(t, ctx, func(o *options.Options) {
		o.KubernetesEndpoints, o.KubernetesEndpointAddress = true, "192.0.2.1"
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30s")
	}
}
