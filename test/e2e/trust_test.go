package e2e

import (
	"context"
	"crypto/sha512"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// The trust model end to end: what the front asserts to the apiservers for a client, and what it
// shows a client, is never more than the apiservers themselves would grant it.

// trustFront starts a testbed with cfg and a front before it.
func trustFront(t *testing.T, cfg testbed.Config) (*testbed.Testbed, *front.Front) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	t.Logf("front %s served by the %s", f.URL, f.DataPlane)
	return tb, f
}

// answer is one HTTP exchange's outcome; a transport error is never an answer.
type answer struct {
	code int
	body string
	etag string
}

func trustGet(t *testing.T, tb *testbed.Testbed, cert *testbed.CertPair, url, token, accept string) answer {
	t.Helper()
	c := httpsClient(t, tb, cert)
	c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v (a transport error is a failure, not a refusal)", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return answer{code: resp.StatusCode, body: string(b), etag: resp.Header.Get("ETag")}
}

// certKubeconfig writes a kubeconfig for server with a client certificate.
func certKubeconfig(t *testing.T, tb *testbed.Testbed, server string, cert testbed.CertPair) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: cert.Cert, ClientKey: cert.Key}
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: tb.PKI.CA.Cert, TLSServerName: testbed.ServingSNI}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "user"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "cert.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	discoveryGV      = "/apis/" + mapGroup + "/v1"
)

// TestTrustCertificateGroups: a client certificate with several Organizations, system:masters not
// the last: through the front the apiserver sees every group (Envoy's ext_proc mutation code keeps
// only the last value of a header set without `append`), so the user can do what system:masters can.
func TestTrustCertificateGroups(t *testing.T) {
	tb, f := trustFront(t, testbed.Config{})
	cert, err := tb.PKI.IssueClient(tb.PKI.ClusterCA(), "carol", "carol", "system:masters", "dev", "platform-engineering-oncall")
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(cert.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	parsed, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	orgs := parsed.Subject.Organization
	if i := slices.Index(orgs, "system:masters"); i < 0 || i == len(orgs)-1 {
		t.Fatalf("the certificate's Organizations %v do not have system:masters before the last: the test is wrong", orgs)
	}
	whoami := func(server string) authenticationv1.UserInfo {
		t.Helper()
		out := mustKubectl(t, certKubeconfig(t, tb, server, cert), "auth", "whoami", "-o", "json")
		var r authenticationv1.SelfSubjectReview
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("whoami at %s: %v\n%s", server, err, out)
		}
		return r.Status.UserInfo
	}
	direct := whoami(tb.MustApiserver("new").URL())
	through := whoami(f.URL)
	t.Logf("directly %s %v; through the front %s %v", direct.Username, direct.Groups, through.Username, through.Groups)
	for _, g := range orgs {
		if !slices.Contains(direct.Groups, g) {
			t.Fatalf("the apiserver itself does not list group %s: %v (the test is wrong)", g, direct.Groups)
		}
		if !slices.Contains(through.Groups, g) {
			t.Errorf("through the front group %s is missing: %v", g, through.Groups)
		}
	}
	if through.Username != "carol" || !slices.Equal(slices.Sorted(slices.Values(through.Groups)), slices.Sorted(slices.Values(direct.Groups))) {
		t.Errorf("through the front %s %v, directly %s %v", through.Username, through.Groups, direct.Username, direct.Groups)
	}
	// What only system:masters may do here: carol has no RBAC binding of her own.
	kc := certKubeconfig(t, tb, f.URL, cert)
	if out := strings.TrimSpace(mustKubectl(t, kc, "auth", "can-i", "*", "*", "--all-namespaces")); out != "yes" {
		t.Errorf("can-i * * through the front: %q, want yes", out)
	}
	mustKubectl(t, kc, "get", "secrets", "-n", "kube-system")
	mustKubectl(t, kc, "get", mapResource)
}

// TestTrustNoAnonymous: with every apiserver started --anonymous-auth=false, a request without
// credentials through the front gets exactly the apiserver's own 401, on every kind of path.
func TestTrustNoAnonymous(t *testing.T) {
	tb, f := trustFront(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{
		{Name: "old", Version: testbed.OldVersion, NoAnonymous: true},
		{Name: "new", Version: testbed.NewVersion, NoAnonymous: true},
	}})
	direct := tb.MustApiserver("new").URL()
	for _, path := range []string{"/api/v1/namespaces", "/apis/" + mapGroup + "/v1/" + mapResource, "/version", "/healthz", "/api", "/apis", discoveryGV} {
		d := trustGet(t, tb, nil, direct+path, "", acceptAggregated)
		if d.code != http.StatusUnauthorized {
			t.Fatalf("%s directly: %d, want 401 (the testbed is wrong)", path, d.code)
		}
		if got := trustGet(t, tb, nil, f.URL+path, "", acceptAggregated); got.code != http.StatusUnauthorized || got.body != d.body {
			t.Errorf("%s without credentials through the front: %d %.200s, want the apiserver's own 401 %.200s", path, got.code, got.body, d.body)
		}
	}
	// Credentials still work.
	if got := trustGet(t, tb, nil, f.URL+"/api/v1/namespaces", testbed.LowPrivToken, ""); got.code != http.StatusForbidden {
		t.Errorf("alice through the front: %d, want 403", got.code)
	}
	if got := trustGet(t, tb, &tb.PKI.Admin, f.URL+"/api/v1/namespaces", "", ""); got.code != http.StatusOK {
		t.Errorf("admin certificate through the front: %d, want 200", got.code)
	}
}

// TestTrustAnonymousAndDiscovery: with anonymous enabled (the default), a request without
// credentials gets the same answer through the front as directly; discovery at the front is shown
// only to requests an apiserver authorizes, and then merged.
func TestTrustAnonymousAndDiscovery(t *testing.T) {
	tb, f := trustFront(t, testbed.Config{})
	direct := tb.MustApiserver("new").URL()
	for _, path := range []string{"/api/v1/namespaces", "/version", "/healthz", "/apis/" + mapGroup + "/v1/" + mapResource} {
		d := trustGet(t, tb, nil, direct+path, "", "")
		// A refusal must be the apiserver's own, body and all; a 200 (/version, /healthz) may come
		// from either apiserver, whose versions differ.
		if got := trustGet(t, tb, nil, f.URL+path, "", ""); got.code != d.code || d.code != http.StatusOK && got.body != d.body {
			t.Errorf("%s without credentials: directly %d %.200s, through the front %d %.200s", path, d.code, d.body, got.code, got.body)
		}
	}

	merged := mergedETags(t, tb, f)
	for _, path := range []string{"/api", "/apis", discoveryGV} {
		accept := acceptAggregated
		if path == discoveryGV {
			accept = "application/json"
		}
		// No credentials: the apiserver's own refusal.
		d := trustGet(t, tb, nil, direct+path, "", accept)
		if d.code != http.StatusUnauthorized && d.code != http.StatusForbidden {
			t.Fatalf("%s directly without credentials: %d, want 401 or 403 (the testbed is wrong)", path, d.code)
		}
		if got := trustGet(t, tb, nil, f.URL+path, "", accept); got.code != d.code || got.body != d.body {
			t.Errorf("%s without credentials: through the front %d %.200s, directly %d %.200s", path, got.code, got.body, d.code, d.body)
		}
		// An invalid token: 401.
		if got := trustGet(t, tb, nil, f.URL+path, "not-a-valid-token", accept); got.code != http.StatusUnauthorized {
			t.Errorf("%s with an invalid token: %d %.200s, want 401", path, got.code, got.body)
		}
		// A valid low-privilege token and a client certificate: served, merged.
		for name, a := range map[string]answer{
			"alice token":        trustGet(t, tb, nil, f.URL+path, testbed.LowPrivToken, accept),
			"client certificate": trustGet(t, tb, &tb.PKI.LowPriv, f.URL+path, "", accept),
		} {
			if a.code != http.StatusOK {
				t.Errorf("%s with %s: %d %.200s, want 200", path, name, a.code, a.body)
				continue
			}
			switch path {
			case "/apis":
				// The merged document, not one apiserver's: its ETag is the Topology's.
				if a.etag != merged[path] || !strings.Contains(a.body, mapResource) {
					t.Errorf("%s with %s: ETag %s (merged %s), lists %s: %v", path, name, a.etag, merged[path], mapResource, strings.Contains(a.body, mapResource))
				}
			case "/api":
				if a.etag != merged[path] {
					t.Errorf("%s with %s: ETag %s, want the merged %s", path, name, a.etag, merged[path])
				}
			default:
				if !strings.Contains(a.body, `"name":"`+mapResource+`"`) {
					t.Errorf("%s with %s: does not list %s: %.300s", path, name, mapResource, a.body)
				}
			}
		}
	}
}

// mergedETags are the ETags of the merged /api and /apis the front serves the admin: each the
// SHA-512 (upper-case hex) of the JSON encoding of the list served, as skewgate computes it for the
// document it merged, and for /apis neither apiserver's own (the two serve different groups, so
// only a merge lists both).
func mergedETags(t *testing.T, tb *testbed.Testbed, f *front.Front) map[string]string {
	t.Helper()
	etags := map[string]string{}
	for _, path := range []string{"/api", "/apis"} {
		a := trustGet(t, tb, nil, f.URL+path, testbed.AdminToken, acceptAggregated)
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal([]byte(a.body), &list); a.code != http.StatusOK || err != nil {
			t.Fatalf("%s as the admin through the front: %d (%v) %.300s, want 200 with an APIGroupDiscoveryList", path, a.code, err, a.body)
		}
		data, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(data))); a.etag != want {
			t.Fatalf("%s as the admin through the front: ETag %s, want the SHA-512 of the list served %s", path, a.etag, want)
		}
		if path == "/apis" {
			for _, s := range tb.Apiservers() {
				if d := trustGet(t, tb, nil, s.URL()+path, testbed.AdminToken, acceptAggregated); d.etag == a.etag {
					t.Fatalf("%s through the front has %s's own ETag %s: not the merged document", path, s.Name, d.etag)
				}
			}
		}
		etags[path] = a.etag
	}
	return etags
}
