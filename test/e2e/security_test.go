package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// identityHeaders are headers a client might send to claim an identity.
var identityHeaders = []string{
	"X-Remote-User", "admin",
	"X-Remote-Group", "system:masters",
	"X-Remote-Extra-Scopes", "everything",
	"X-Remote-Uid", "0",
	"X-Forwarded-Client-Cert", `Hash=00;Cert="-----BEGIN%20CERTIFICATE-----"`,
}

// TestSecuritySpoofedHeaders: a low-privilege token with spoofed identity and routing headers is still
// the low-privilege user, with ext_proc up and with ext_proc down; a client-sent routing header never
// sends a request to the cluster it names.
func TestSecuritySpoofedHeaders(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	down, err := front.Start(ctx, e.tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Host: 5, ExtProcDown: true, Logger: zaptest.NewLogger(t).Named("skewgate-extproc-down"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	c := httpsClient(t, e.tb, nil)
	direct := e.tb.MustApiserver("new").URL()
	alice := whoami(t, c, direct, testbed.LowPrivToken)
	if alice.Username != "alice" {
		t.Fatalf("the testbed's low-privilege token is %+v directly, want alice", alice)
	}
	// Names a client might put in the routing header: an apiserver that lacks the skewed API, and the
	// gRPC clusters through which Envoy reaches skewgate itself.
	spoofedClusters := []string{wire.UpstreamCluster("old"), wire.ExtProcCluster, wire.XDSCluster}
	const n = 20 // requests per spoofed cluster name
	for _, tc := range []struct {
		name string
		url  string
	}{{"ext_proc up", e.f.URL}, {"ext_proc down", down.URL}} {
		name, url := tc.name, tc.url
		code, body := mustDo(t, c, http.MethodGet, url+"/api/v1/namespaces/kube-system/secrets", testbed.LowPrivToken, identityHeaders...)
		if code != http.StatusForbidden || !forbiddenFor(body, "alice") {
			t.Errorf("%s: list secrets as alice with spoofed headers: %d %.200s, want 403 for alice", name, code, body)
		}
		// The identity is alice's, exactly as directly: no spoofed user, group, uid or extra.
		if u := whoami(t, c, url, testbed.LowPrivToken, identityHeaders...); !reflect.DeepEqual(u, alice) {
			t.Errorf("%s: spoofed headers changed the identity: %+v, directly %+v", name, u, alice)
		}
		// Anonymous stays anonymous, with ext_proc down too: an anonymous request rides a route to
		// clusters that present no client certificate, so the apiserver applies its own anonymous
		// policy (403 for system:anonymous), never the front's identity and never a spoofed one.
		code, body = mustDo(t, c, http.MethodGet, url+"/api/v1/namespaces", "", identityHeaders...)
		if code != http.StatusForbidden || !forbiddenFor(body, "system:anonymous") {
			t.Errorf("%s: anonymous with spoofed headers: %d %.200s, want 403 for system:anonymous", name, code, body)
		}
		// A client's routing header is removed before the route is chosen (internal_only_headers), with
		// ext_proc up and down: the request goes where skewgate sends it, never to the cluster the
		// client named.
		for _, spoofed := range spoofedClusters {
			h := []string{wire.RouteHeader, spoofed}
			// An apiserver answers (never a gRPC server, never Envoy's 503 for a cluster it cannot
			// use), and the identity is still the client's own.
			if u := whoami(t, c, url, testbed.LowPrivToken, append(h, identityHeaders...)...); !reflect.DeepEqual(u, alice) {
				t.Errorf("%s: with %s: %s the identity is %+v, directly %+v", name, wire.RouteHeader, spoofed, u, alice)
			}
			versions := map[string]int{}
			for range n {
				versions[gitVersion(t, c, url, h...)]++
			}
			t.Logf("%s: GET /version with %s: %s, %d times: answered by %v", name, wire.RouteHeader, spoofed, n, versions)
			for v := range versions {
				if v != testbed.OldVersion && v != testbed.NewVersion {
					t.Errorf("%s: with %s: %s, /version answered %q: not a testbed apiserver", name, wire.RouteHeader, spoofed, v)
				}
			}
			// Were the header obeyed, all n would come from old; balanced at random over old and new
			// they all do with probability 2^-n.
			if spoofed == wire.UpstreamCluster("old") && versions[testbed.NewVersion] == 0 {
				t.Errorf("%s: all %d requests naming %s were answered by old (%s): the client's routing header was obeyed", name, n, spoofed, testbed.OldVersion)
			}
			if name == "ext_proc up" {
				// ext_proc names the capable apiserver for the skewed API, whatever the client named.
				for i := range n {
					if code, body := mustDo(t, c, http.MethodGet, url+"/apis/"+mapGroup+"/v1/"+mapResource, testbed.AdminToken, h...); code != http.StatusOK {
						t.Errorf("%s: %s with %s: %s (request %d): %d %.200s, want 200 from the capable apiserver", name, mapResource, wire.RouteHeader, spoofed, i, code, body)
						break
					}
				}
			}
		}
		// The common path works with ext_proc down too (failure_mode_allow: default route).
		if code, body := mustDo(t, c, http.MethodGet, url+"/api/v1/namespaces/default/configmaps", testbed.AdminToken); code != http.StatusOK {
			t.Errorf("%s: configmaps: %d %.200s, want 200", name, code, body)
		}
	}
}

// TestSecurityClientCertificates: a certificate from an untrusted CA and an expired certificate: the
// apiserver answers 401 to them; the front refuses them at the TLS handshake with the alert that
// says why (Envoy verifies a presented client certificate against the client CA and fails the
// handshake with SSL_alert_from_verify_result of the verification error:
// source/common/tls/cert_validator/default_validator.cc, DefaultCertValidator::doVerifyCertChain;
// require_client_certificate false only lets a client present none). Meanwhile the same front
// serves a good certificate, so a dead front cannot pass.
func TestSecurityClientCertificates(t *testing.T) {
	e := setup(t)
	p := e.tb.PKI
	rogue, err := testbed.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rogueAdmin, err := rogue.IssueClient(rogue.ClusterCA(), "rogue-admin", "admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := p.Issue(p.ClusterCA(), "expired-admin", testbed.CertOptions{CommonName: "admin", Organization: []string{"system:masters"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	direct := e.tb.MustApiserver("new").URL()
	alive := func(when string) {
		t.Helper()
		admin := p.Admin
		if code, body := mustDo(t, httpsClient(t, e.tb, &admin), http.MethodGet, e.f.URL+"/api/v1/namespaces", ""); code != http.StatusOK {
			t.Fatalf("%s: the admin certificate through the front: %d %.200s, want 200", when, code, body)
		}
	}
	alive("before")
	for _, tc := range []struct {
		name  string
		cert  testbed.CertPair
		alert string // what the front's TLS stack answers
	}{
		{"untrusted CA", rogueAdmin, "tls: unknown certificate authority"},
		{"expired", expired, "tls: expired certificate"},
	} {
		c := httpsClient(t, e.tb, &tc.cert)
		if code, body := mustDo(t, c, http.MethodGet, direct+"/api/v1/namespaces", ""); code != http.StatusUnauthorized {
			t.Fatalf("%s: the apiserver itself answered %d %.200s, want 401: the test is wrong", tc.name, code, body)
		}
		code, body, err := do(t, httpsClient(t, e.tb, &tc.cert), http.MethodGet, e.f.URL+"/api/v1/namespaces", "")
		t.Logf("%s: directly 401; through the front %d %v", tc.name, code, err)
		if got := tlsAlert(err); got != tc.alert {
			t.Errorf("%s: through the front: %d %.200s, error %v; want the handshake refused with %q", tc.name, code, body, err, tc.alert)
		}
	}
	alive("after")
	// No certificate and no token: anonymous, the same answer as directly.
	c := httpsClient(t, e.tb, nil)
	for _, url := range []string{direct, e.f.URL} {
		if code, body := mustDo(t, c, http.MethodGet, url+"/api/v1/namespaces", ""); code != http.StatusForbidden || !forbiddenFor(body, "system:anonymous") {
			t.Errorf("anonymous at %s: %d %.200s, want 403 for system:anonymous", url, code, body)
		}
	}
}

// hostile is a TLS server that is not an apiserver and counts the HTTP requests it receives.
type hostile struct {
	addr     string
	requests atomic.Int64
}

func startHostile(t *testing.T, tb *testbed.Testbed, lis net.Listener) *hostile {
	t.Helper()
	// A certificate from another CA: what an attacker who can write Leases but does not hold the
	// cluster CA can present.
	rogue, err := testbed.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := rogue.IssueServing("hostile", net.ParseIP(strings.Split(lis.Addr().String(), ":")[0]))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{addr: lis.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.requests.Add(1)
		w.Write([]byte("ok"))
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}, ErrorLog: nil}
	go srv.ServeTLS(lis, "", "")
	t.Cleanup(func() { srv.Close() })
	return h
}

// TestSecurityHostileLease: identity Leases whose address annotation points at a server that is not an
// apiserver, outside and inside the allowed CIDR: neither receives a single request.
func TestSecurityHostileLease(t *testing.T) {
	e := setup(t)
	outside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside, err := net.Listen("tcp", net.JoinHostPort(e.tb.HostIP(20).String(), "6443"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]*hostile{"evil-outside": startHostile(t, e.tb, outside), "evil-inside": startHostile(t, e.tb, inside)}
	cs := kubernetes.NewForConfigOrDie(e.tb.RESTConfig(e.tb.MustApiserver("new").URL(), testbed.AdminByToken))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for host, h := range targets {
		now := metav1.NewMicroTime(time.Now())
		dur := int32(3600)
		holder := host + "_forged"
		_, err := cs.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "apiserver-" + host, Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", discovery.HostnameLabel: host},
				Annotations: map[string]string{discovery.PeerAddressAnnotation: h.addr}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now, AcquireTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Wait until discovery has seen both Leases: the outside one rejected by policy, the inside one
	// accepted as an address but never proven an apiserver.
	deadline := time.Now().Add(time.Minute)
	for {
		top := e.f.Server.Discovery.Current()
		u, seenInside := top.Upstream("evil-inside")
		_, seenOutside := top.Upstream("evil-outside")
		if seenOutside {
			t.Fatalf("a Lease address outside the allowed CIDR became an upstream")
		}
		if seenInside && !u.Capabilities && !u.Ready {
			t.Logf("evil-inside is an upstream without capabilities: %+v", u)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery never saw the inside Lease: %+v", top.Upstreams)
		}
		time.Sleep(100 * time.Millisecond) // polling the Topology
	}
	// Traffic through the front for a while: every request lands on a real apiserver.
	c := httpsClient(t, e.tb, nil)
	for range 50 {
		if code, body := mustDo(t, c, http.MethodGet, e.f.URL+"/api/v1/namespaces/default/configmaps", testbed.AdminToken); code != http.StatusOK {
			t.Fatalf("configmaps through the front: %d %.200s", code, body)
		}
	}
	for host, h := range targets {
		if n := h.requests.Load(); n != 0 {
			t.Errorf("%s (%s) received %d HTTP requests", host, h.addr, n)
		}
	}
}
