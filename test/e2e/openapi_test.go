package e2e

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// openapiIndex is the /openapi/v3 index as kube-openapi's handler3 writes it.
type openapiIndex struct {
	Paths map[string]struct {
		URL string `json:"serverRelativeURL"`
	} `json:"paths"`
}

// rawGet sends a GET and returns the response (body read) and its body.
func rawGet(t *testing.T, c *http.Client, url, token string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: no HTTP answer: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, body
}

// noRedirects is a client that shows a 301 instead of following it.
func noRedirects(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

func sha512Hex(b []byte) string { return fmt.Sprintf("%X", sha512.Sum512(b)) }

func indexOf(t *testing.T, c *http.Client, base, token string) (openapiIndex, *http.Response, []byte) {
	t.Helper()
	resp, body := rawGet(t, c, base+"/openapi/v3", token, "Accept", "application/json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/openapi/v3: %d %s", base, resp.StatusCode, body)
	}
	var idx openapiIndex
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatalf("GET %s/openapi/v3: %v", base, err)
	}
	return idx, resp, body
}

func hashOf(u string) string { _, h, _ := strings.Cut(u, "?hash="); return h }

// explainLoop runs `kubectl explain what` rounds times through kubeconfig, each with a fresh cache
// directory (kubectl keeps a document it read under a hash for a year), and returns the failures and
// the last error output. A run succeeds when the output shows kind and want.
func explainLoop(t *testing.T, kubeconfig, what, kind, want string, rounds int) (int, string) {
	t.Helper()
	failures, last := 0, ""
	for range rounds {
		out, stderr, err := kubectl(kubeconfig, "explain", what, "--cache-dir", t.TempDir())
		if err != nil || !strings.Contains(out, kind) || !strings.Contains(out, want) {
			failures++
			last = strings.TrimSpace(stderr)
			if last == "" {
				last = strings.TrimSpace(out)
			}
		}
	}
	return failures, last
}

var etagRE = regexp.MustCompile(`^"[0-9A-F]{128}"$`)

// TestScenarioOpenAPI: the front's /openapi/v3 during the default skew (v1.35.4 and v1.36.3).
// It is the front's own index: each key names the document of the apiservers that serve every
// resource of the group-version (the v1.36 one for admissionregistration.k8s.io/v1, which has
// mutatingadmissionpolicies), and every URL in it answers 200 with exactly the bytes its hash names,
// never a redirect, whichever apiserver the data plane would have picked. Conditional requests,
// wrong hashes, protobuf and anonymous requests behave as on an apiserver. With ext_proc stopped,
// Envoy's route table alone still sends the index and the documents to one consistent source.
func TestScenarioOpenAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Host: 9, Switches: true,
		Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)
	c := httpsClient(t, tb, nil)
	nc := noRedirects(c)
	tok := testbed.AdminToken
	newAPI, _ := tb.Apiserver("new")
	oldAPI, _ := tb.Apiserver("old")

	newIdx, _, _ := indexOf(t, c, newAPI.URL(), tok)
	oldIdx, _, _ := indexOf(t, c, oldAPI.URL(), tok)
	own := []ownIndex{{"old", oldAPI.URL(), oldIdx}, {"new", newAPI.URL(), newIdx}}
	idx, resp, body := indexOf(t, c, f.URL, tok)
	etag := resp.Header.Get("Etag")
	if !etagRE.MatchString(etag) || etag != `"`+sha512Hex(body)+`"` {
		t.Errorf("front's index: Etag %q, want the quoted SHA-512 of its bytes %q (handler3's index ETag)", etag, sha512Hex(body))
	}
	key := "apis/" + mapGroup + "/v1"
	if got, want := hashOf(idx.Paths[key].URL), hashOf(newIdx.Paths[key].URL); got != want {
		t.Errorf("front's index names %s by hash %.16s…, want the v1.36 apiserver's %.16s… (old's is %.16s…)",
			key, got, want, hashOf(oldIdx.Paths[key].URL))
	}
	checkKeySet(t, "front's index", idx, own)
	if r, _ := rawGet(t, c, f.URL+"/openapi/v3", tok, "If-None-Match", etag); r.StatusCode != http.StatusNotModified {
		t.Errorf("front's index with If-None-Match of its own Etag: %d, want 304", r.StatusCode)
	}

	// Every document the index names, three times each: 200, never a redirect, and exactly the bytes
	// of its hash.
	served, merged, _ := checkDocuments(t, nc, f.URL, tok, idx, own, 3)
	if merged != 0 {
		t.Errorf("%d documents of the front's index are under a hash no apiserver publishes: during this skew every group-version has an apiserver that serves all of it, so none is merged", merged)
	}
	// A wrong hash redirects to the document the index names.
	r, _ := rawGet(t, nc, f.URL+"/openapi/v3/"+key+"?hash=0123", tok)
	if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != idx.Paths[key].URL {
		t.Errorf("GET %s?hash=0123: %d Location %q, want 301 to %q", key, r.StatusCode, r.Header.Get("Location"), idx.Paths[key].URL)
	}
	// Protobuf, as the apiserver offers it, under the same Etag.
	const protobuf = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"
	r, b := rawGet(t, nc, f.URL+idx.Paths[key].URL, tok, "Accept", protobuf)
	_, wantPB := rawGet(t, nc, newAPI.URL()+idx.Paths[key].URL, tok, "Accept", protobuf)
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v3.v1.0+protobuf" ||
		r.Header.Get("Etag") != `"`+hashOf(idx.Paths[key].URL)+`"` || !bytes.Equal(b, wantPB) {
		t.Errorf("GET %s as protobuf: %d %q Etag %q, %d bytes (the v1.36 apiserver's own: %d bytes, equal: %v)",
			key, r.StatusCode, r.Header.Get("Content-Type"), r.Header.Get("Etag"), len(b), len(wantPB), bytes.Equal(b, wantPB))
	}
	// Without credentials the front answers what the apiserver answers (by default its 403), never
	// the index: the whole Status, as each apiserver sends it.
	viaFront, anonBody := rawGet(t, c, f.URL+"/openapi/v3", "")
	if viaFront.StatusCode != http.StatusForbidden || strings.Contains(string(anonBody), "serverRelativeURL") {
		t.Errorf("GET /openapi/v3 without credentials: front %d %.300s, want the apiserver's 403", viaFront.StatusCode, anonBody)
	}
	var anonFront map[string]any
	if err := json.Unmarshal(anonBody, &anonFront); err != nil || anonFront["kind"] != "Status" {
		t.Errorf("GET /openapi/v3 without credentials through the front: %v, not a Status: %.300s", err, anonBody)
	}
	for _, a := range own {
		direct, directBody := rawGet(t, c, a.url+"/openapi/v3", "")
		var want map[string]any
		if err := json.Unmarshal(directBody, &want); err != nil {
			t.Fatalf("GET /openapi/v3 without credentials on %s: %v: %.300s", a.name, err, directBody)
		}
		if direct.StatusCode != viaFront.StatusCode || !reflect.DeepEqual(anonFront, want) ||
			direct.Header.Get("Content-Type") != viaFront.Header.Get("Content-Type") {
			t.Errorf("GET /openapi/v3 without credentials: front %d %q %s, the %s apiserver itself %d %q %s: want the same Status",
				viaFront.StatusCode, viaFront.Header.Get("Content-Type"), anonBody, a.name, direct.StatusCode, direct.Header.Get("Content-Type"), directBody)
		}
	}

	// kubectl explain of the skewed resource: through the front every time, and failing open.
	const rounds = 10
	frontFails, last := explainLoop(t, f.Kubeconfig(testbed.AdminByToken), mapResource+".spec", "MutatingAdmissionPolicy", "FIELD", rounds)
	if frontFails > 0 {
		t.Errorf("kubectl explain %s through the front: %d of %d failed (last: %s)", mapResource, frontFails, rounds, last)
	}
	f.ExtProc.Set(front.Refuse)
	// Failing open, Envoy's route table sends the index and every document to the most capable
	// apiservers (here the v1.36 one, which serves every group-version the other does): its own
	// index, and every URL in it 200 with its bytes, no redirect (README: 0 redirected). A
	// topology where the index and a document come from two groups may need one redirect
	// (README, Limits); this one may not.
	failOpenIdx, _, _ := indexOf(t, c, f.URL, tok)
	checkKeySet(t, "ext_proc stopped: the front's index", failOpenIdx, own[1:])
	failOpenReads, failOpenMerged, redirected := checkDocuments(t, nc, f.URL, tok, failOpenIdx, own[1:], 1)
	if failOpenMerged != 0 {
		t.Errorf("ext_proc stopped: %d documents under a hash the v1.36 apiserver does not publish, want its own index and documents", failOpenMerged)
	}
	openFails, last := explainLoop(t, f.Kubeconfig(testbed.AdminByToken), mapResource+".spec", "MutatingAdmissionPolicy", "FIELD", rounds)
	refused := f.ExtProc.Refused.Load()
	f.ExtProc.Set(front.Forward)
	if refused == 0 {
		t.Errorf("ext_proc was never refused while stopped: the fail-open phase proves nothing")
	}
	if openFails > 0 {
		t.Errorf("kubectl explain %s with ext_proc stopped: %d of %d failed (last: %s)", mapResource, openFails, rounds, last)
	}
	t.Logf("front's index: %d keys (apiservers: %d, %d); %d document reads all 200 with matching hashes; explain %d/%d failures; "+
		"failing open: %d of %d documents redirected once, explain %d/%d failures",
		len(idx.Paths), len(oldIdx.Paths), len(newIdx.Paths), served, frontFails, rounds, redirected, len(failOpenIdx.Paths), openFails, rounds)
	writeResults(t, &env{tb: tb, f: f}, map[string]any{
		"index_keys": len(idx.Paths), "document_reads": served, "document_reads_ext_proc_stopped": failOpenReads, "explain_rounds": rounds,
		"explain_failures": frontFails, "explain_failures_ext_proc_stopped": openFails,
		"documents_redirected_ext_proc_stopped": redirected,
	})
}
