package e2e

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

// httpsClient trusts the cluster CA and presents cert (if any).
func httpsClient(t *testing.T, tb *testbed.Testbed, cert *testbed.CertPair) *http.Client {
	t.Helper()
	return &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, tb, cert)}, Timeout: 20 * time.Second}
}

// clientTLS trusts the testbed's CA and presents cert, if any.
func clientTLS(t *testing.T, tb *testbed.Testbed, cert *testbed.CertPair) *tls.Config {
	t.Helper()
	var pair testbed.CertPair
	if cert != nil {
		pair = *cert
	}
	tc, err := tb.TLSConfig(pair)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func do(t *testing.T, c *http.Client, method, url, token string, headers ...string) (int, string, error) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
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
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// mustDo is do for a request that must get an HTTP answer: a transport error fails the test, so a
// dead front never passes for one that refused.
func mustDo(t *testing.T, c *http.Client, method, url, token string, headers ...string) (int, string) {
	t.Helper()
	code, body, err := do(t, c, method, url, token, headers...)
	if err != nil {
		t.Fatalf("%s %s: no HTTP answer: %v", method, url, err)
	}
	return code, body
}

// tlsAlert returns the text of the TLS alert the peer sent to end the connection ("tls: unknown
// certificate authority"), or "" when err is anything else (a reset, a timeout, an HTTP error).
func tlsAlert(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		return op.Err.Error()
	}
	return ""
}

// userInfo is the user an apiserver saw, from a SelfSubjectReview.
type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

// whoami posts a SelfSubjectReview and returns the user the apiserver saw; anything but 201 fails.
func whoami(t *testing.T, c *http.Client, url, token string, headers ...string) userInfo {
	t.Helper()
	code, body := mustDo(t, c, http.MethodPost, url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", token, headers...)
	var review struct {
		Status struct {
			UserInfo userInfo `json:"userInfo"`
		} `json:"status"`
	}
	if code != http.StatusCreated {
		t.Fatalf("whoami at %s: %d %.300s, want 201", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), &review); err != nil {
		t.Fatalf("whoami at %s: %v: %.300s", url, err, body)
	}
	return review.Status.UserInfo
}

// gitVersion GETs /version and returns the gitVersion of the apiserver that answered; anything but
// 200 with a version document fails.
func gitVersion(t *testing.T, c *http.Client, url string, headers ...string) string {
	t.Helper()
	code, body := mustDo(t, c, http.MethodGet, url+"/version", testbed.AdminToken, headers...)
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.GitVersion == "" {
		t.Fatalf("GET %s/version with %q: %d %.200s, want 200 and an apiserver's version", url, headers, code, body)
	}
	return v.GitVersion
}

// forbiddenFor tells whether body is the apiserver's Status for a 403 to user: its message names the
// user the apiserver saw ("... is forbidden: User \"alice\" cannot ...").
func forbiddenFor(body, user string) bool {
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	return json.Unmarshal([]byte(body), &st) == nil && st.Reason == "Forbidden" && strings.Contains(st.Message, `User "`+user+`"`)
}
