package dataplane

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// gatedUpstream answers every health check (/readyz) with status, but only once release was
// called; checked receives a value when a check arrives. Other requests get 200 "ok".
type gatedUpstream struct {
	srv     *httptest.Server
	gate    chan struct{}
	release func()
	checked chan struct{}
}

func newGatedUpstream(t *testing.T, status int) *gatedUpstream {
	u := &gatedUpstream{gate: make(chan struct{}), checked: make(chan struct{}, 1)}
	var once sync.Once
	u.release = func() { once.Do(func() { close(u.gate) }) }
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			select {
			case u.checked <- struct{}{}:
			default:
			}
			<-u.gate
			w.WriteHeader(status)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.srv.Close)
	t.Cleanup(u.release) // runs first: no handler stays blocked
	return u
}

// healthChecked is plainCluster with an HTTP health check of /readyz whose timeout outlasts the test.
func healthChecked(name, addr string) *clusterv3.Cluster {
	c := plainCluster(name, addr)
	c.HealthChecks = []*corev3.HealthCheck{{Timeout: durationpb.New(30 * time.Second), Interval: durationpb.New(100 * time.Millisecond),
		UnhealthyThreshold: wrapperspb.UInt32(1), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/readyz", CodecClientType: typev3.CodecClientType_HTTP1}}}}
	return c
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) uint32 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port)
}

// starting is a data plane whose Start has not returned yet.
type starting struct {
	f    *front
	addr string
	done chan error
}

// startAsync serves res (the listener on a fixed loopback port is added, with the front
// certificate unless noCert) and calls Start without waiting for it.
func startAsync(t *testing.T, noCert bool, res ...types.Resource) *starting {
	t.Helper()
	f := &front{t: t, x: startXDS(t), pki: newPKI(t)}
	cert, key, _ := f.pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
	f.base = []types.Resource{certSecret("front-cert", cert, key, "")}
	port := freePort(t)
	l := listener(t, nil)
	l.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: port}
	res = append(res, l)
	f.base = append(f.base, l)
	if noCert {
		f.x.set(t, res...)
	} else {
		f.x.set(t, append(res, f.base[0])...)
	}
	s := &starting{f: f, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), done: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	go func() {
		defer cancel()
		dp, err := Start(ctx, Config{XDSAddress: f.x.addr, NodeID: testNode, Protocol: Delta, Seed: 42, Logf: t.Logf})
		if err == nil {
			t.Cleanup(dp.Close)
			f.dp = dp
		}
		s.done <- err
	}()
	return s
}

// refused asserts that nothing accepts a connection on the listener's address and that Start has
// not returned.
func (s *starting) refused(what string) {
	s.f.t.Helper()
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err == nil {
		conn.Close()
		s.f.t.Fatalf("%s: a connection to the listener was accepted", what)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		s.f.t.Fatalf("%s: dial: %v, want connection refused", what, err)
	}
	select {
	case err := <-s.done:
		s.f.t.Fatalf("%s: Start returned (%v)", what, err)
	default:
	}
}

// serving waits for Start to return and the listener to serve.
func (s *starting) serving() *front {
	s.f.t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			s.f.t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		s.f.t.Fatal("Start did not return")
	}
	return s.f
}

// TestNoConnectionBeforeClustersInitialized: a (re)started data plane accepts no connection until
// the clusters of the first CDS response initialized, which for a health-checked cluster includes
// the first check of every host; a host failing that check does not hold initialization back: the
// cluster initializes with the host unhealthy (no healthy upstream, never cluster_not_found).
func TestNoConnectionBeforeClustersInitialized(t *testing.T) {
	for _, tc := range []struct {
		name   string
		check  int
		status int
		body   string
	}{
		{"first check passes", 200, 200, "ok"},
		{"first check fails", 503, 503, "no_healthy_upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newGatedUpstream(t, tc.check)
			s := startAsync(t, false, routes(routeTo("all", "a")), healthChecked("a", strings.TrimPrefix(u.srv.URL, "http://")))
			select {
			case <-u.checked:
			case <-time.After(10 * time.Second):
				t.Fatal("no health check arrived")
			}
			// The first check is in flight; give the listener, its routes and its secret the
			// time to arrive if the data plane asked for them.
			time.Sleep(300 * time.Millisecond)
			s.refused("first health check in flight")
			if s.f.x.asked(resourcev3.ListenerType) {
				t.Error("listeners (LDS) were asked for before the clusters initialized")
			}
			u.release()
			f := s.serving()
			code, body := get(t, f.client(false), f.url("/"))
			if code != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("first request: %d %q, want %d %q", code, body, tc.status, tc.body)
			}
		})
	}
}

// TestRejectedFirstCDSLetsStartupContinue: a first CDS response the data plane rejects still ends
// CDS initialization (Envoy's CdsApiImpl::onConfigUpdateFailed); the listener serves, and a route
// to the rejected cluster answers cluster_not_found.
func TestRejectedFirstCDSLetsStartupContinue(t *testing.T) {
	bad := plainCluster("a", "127.0.0.1:1")
	bad.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST} // not supported: NACK
	s := startAsync(t, false, routes(routeTo("all", "a")), bad)
	f := s.serving()
	if code, body := get(t, f.client(false), f.url("/")); code != 503 || !strings.Contains(body, "cluster_not_found") {
		t.Errorf("route to the rejected cluster: %d %q, want 503 cluster_not_found", code, body)
	}
}

// TestNoConnectionBeforeRoutesAndSecrets: the listener accepts no connection until its route
// configuration and the SDS secret its TLS context names arrived.
func TestNoConnectionBeforeRoutesAndSecrets(t *testing.T) {
	a := newUpstream(t, "a")
	for _, tc := range []struct {
		name   string
		noCert bool
		res    []types.Resource
	}{
		{"routes missing", false, []types.Resource{plainCluster("a", a.addr())}},
		{"secret missing", true, []types.Resource{plainCluster("a", a.addr()), routes(routeTo("all", "a"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startAsync(t, tc.noCert, tc.res...)
			time.Sleep(500 * time.Millisecond) // CDS, LDS (and RDS or SDS) have long been answered
			s.refused(tc.name)
			s.f.x.set(t, append([]types.Resource{plainCluster("a", a.addr()), routes(routeTo("all", "a"))}, s.f.base...)...)
			f := s.serving()
			if code, body := get(t, f.client(true), f.url("/")); code != 200 || body != "a" {
				t.Errorf("first request: %d %q, want 200 from a", code, body)
			}
		})
	}
}

// TestListenerUpdateWarms: once serving, a listener update that names a secret not received yet
// warms while the active listener keeps serving with its certificate; it replaces the active one
// when the secret arrives.
func TestListenerUpdateWarms(t *testing.T) {
	a := newUpstream(t, "a")
	base := []types.Resource{plainCluster("a", a.addr()), routes(routeTo("all", "a"))}
	f := startFront(t, Delta, append(base, listener(t, nil))...)
	f.waitActive("a")
	old := f.servedSerial()
	updated := listener(t, nil)
	tc := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsRef("front-cert-2")}}}
	updated.FilterChains[0].TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, tc)}}
	f.update(append(base, updated)...)
	f.expectSerial(old, true, "listener update warming for its secret")
	if code, body := get(t, f.client(false), f.url("/")); code != 200 || body != "a" {
		t.Errorf("while the update warms: %d %q, want 200 from a", code, body)
	}
	cert, key, sn := f.pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
	f.update(append(base, updated, certSecret("front-cert-2", cert, key, ""))...)
	f.expectSerial(sn, false, "listener update warmed")
}
