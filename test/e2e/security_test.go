package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
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

// httpsClient trusts the cluster CA and presents cert (if any).
func httpsClient(t *testing.T, tb *testbed.Testbed, cert *testbed.CertPair) *http.Client {
	t.Helper()
	var pair testbed.CertPair
	if cert != nil {
		pair = *cert
	}
	tc, err := tb.TLSConfig(pair)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
}

func do(t *testing.T, c *http.Client, method, url, token string, headers ...string) (int, string, error) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	}
	req, _ := http.NewRequest(method, url, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// identityHeaders are headers a client might send to claim an identity.
var identityHeaders = []string{
	"X-Remote-User", "admin",
	"X-Remote-Group", "system:masters",
	"X-Remote-Extra-Scopes", "everything",
	"X-Remote-Uid", "0",
	"X-Forwarded-Client-Cert", `Hash=00;Cert="-----BEGIN%20CERTIFICATE-----"`,
}

// TestSecuritySpoofedHeaders: a low-privilege token with spoofed identity and routing headers is still
// the low-privilege user, with ext_proc up and with ext_proc down.
func TestSecuritySpoofedHeaders(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	down, err := front.Start(ctx, e.tb, front.Options{Dir: t.TempDir(), Host: 5, ExtProcDown: true, Logger: zaptest.NewLogger(t).Named("skewgate-extproc-down"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	c := httpsClient(t, e.tb, nil)
	for name, url := range map[string]string{"ext_proc up": e.f.URL, "ext_proc down": down.URL} {
		code, body, err := do(t, c, http.MethodGet, url+"/api/v1/namespaces/kube-system/secrets", testbed.LowPrivToken, identityHeaders...)
		if err != nil || code != http.StatusForbidden || !strings.Contains(body, `alice`) {
			t.Errorf("%s: list secrets as alice with spoofed headers: %d %v %.200s, want 403 for alice", name, code, err, body)
		}
		code, body, err = do(t, c, http.MethodPost, url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", testbed.LowPrivToken, identityHeaders...)
		var review struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
					Extra    map[string][]string
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err != nil || code != http.StatusCreated || json.Unmarshal([]byte(body), &review) != nil {
			t.Fatalf("%s: whoami: %d %v %.300s", name, code, err, body)
		}
		u := review.Status.UserInfo
		if u.Username != "alice" || strings.Contains(strings.Join(u.Groups, ","), "system:masters") || len(u.Extra) != 0 {
			t.Errorf("%s: spoofed headers changed the identity: %+v", name, u)
		}
		// Anonymous stays anonymous. With ext_proc down nobody asserts the anonymous identity and the
		// apiserver answers 401: less than anonymous, never more.
		code, body, err = do(t, c, http.MethodGet, url+"/api/v1/namespaces", "", identityHeaders...)
		anonymous := code == http.StatusForbidden && strings.Contains(body, "system:anonymous")
		if err != nil || !(anonymous || (name == "ext_proc down" && code == http.StatusUnauthorized)) {
			t.Errorf("%s: anonymous with spoofed headers: %d %v %.200s, want 403 for system:anonymous", name, code, err, body)
		}
		// A spoofed routing header never sends a request to an incapable apiserver: no 404. (With
		// ext_proc down, Envoy chose the route while the spoofed header was still there, and the
		// header is gone when the router looks for the cluster: 503, the client's own loss.)
		code, body, err = do(t, c, http.MethodGet, url+"/apis/"+mapGroup+"/v1/"+mapResource, testbed.AdminToken, wire.RouteHeader, wire.UpstreamCluster("old"))
		t.Logf("%s: %s with a spoofed %s: %d", name, mapResource, wire.RouteHeader, code)
		if err != nil || code == http.StatusNotFound {
			t.Errorf("%s: spoofed routing header: %d %v %.200s", name, code, err, body)
		}
		if name == "ext_proc up" && code != http.StatusOK {
			t.Errorf("%s: spoofed routing header: %d %.200s, want 200 from a capable apiserver", name, code, body)
		}
		// With ext_proc down the common path still works (failure_mode_allow: default route).
		if code, _, err := do(t, c, http.MethodGet, url+"/api/v1/namespaces/default/configmaps", testbed.AdminToken); err != nil || code != http.StatusOK {
			t.Errorf("%s: configmaps: %d %v", name, code, err)
		}
	}
}

// TestSecurityClientCertificates: no certificate, an untrusted CA, an expired certificate: the front
// refuses them as the apiserver does (never a request with more privilege than proved).
func TestSecurityClientCertificates(t *testing.T) {
	e := setup(t)
	p := e.tb.PKI
	rogueDir := t.TempDir()
	rogue, err := testbed.NewPKI(rogueDir)
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
	for name, cert := range map[string]*testbed.CertPair{"untrusted CA": &rogueAdmin, "expired": &expired} {
		c := httpsClient(t, e.tb, cert)
		dcode, _, derr := do(t, c, http.MethodGet, direct+"/api/v1/namespaces", "")
		fcode, fbody, ferr := do(t, c, http.MethodGet, e.f.URL+"/api/v1/namespaces", "")
		t.Logf("%s: directly %d %v; through the front %d %v", name, dcode, derr, fcode, ferr)
		if derr == nil && dcode != http.StatusUnauthorized {
			t.Fatalf("%s: the apiserver itself answered %d, the test is wrong", name, dcode)
		}
		// The front refuses at the TLS handshake (Envoy verifies presented certificates) or answers
		// 401; it never lets the request through.
		if ferr == nil && fcode != http.StatusUnauthorized {
			t.Errorf("%s: through the front %d %.200s, want refused", name, fcode, fbody)
		}
	}
	// No certificate and no token: anonymous, the same answer as directly.
	c := httpsClient(t, e.tb, nil)
	dcode, _, _ := do(t, c, http.MethodGet, direct+"/api/v1/namespaces", "")
	fcode, _, _ := do(t, c, http.MethodGet, e.f.URL+"/api/v1/namespaces", "")
	if dcode != fcode {
		t.Errorf("anonymous: directly %d, through the front %d", dcode, fcode)
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
		if code, _, err := do(t, c, http.MethodGet, e.f.URL+"/api/v1/namespaces/default/configmaps", testbed.AdminToken); err != nil || code != http.StatusOK {
			t.Fatalf("configmaps through the front: %d %v", code, err)
		}
	}
	for host, h := range targets {
		if n := h.requests.Load(); n != 0 {
			t.Errorf("%s (%s) received %d HTTP requests", host, h.addr, n)
		}
	}
}
