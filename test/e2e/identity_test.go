package e2e

import (
	"bytes"
	"context"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// uidOID is the subject attribute 1.33+ apiservers read as the user's UID
// (k8s.io/apiserver/pkg/authentication/request/x509, CommonNameUserConversion).
var uidOID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}

// review posts a SelfSubjectReview and returns the status, the user the apiserver saw (on 201),
// the body and the Retry-After header. A transport error fails the test.
func review(t *testing.T, c *http.Client, url, token string) (int, userInfo, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("review at %s: no HTTP answer: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatalf("review at %s: %v", url, err)
	}
	var u userInfo
	if resp.StatusCode == http.StatusCreated {
		var r struct {
			Status struct {
				UserInfo userInfo `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(b.String()), &r); err != nil {
			t.Fatalf("review at %s: %v: %.300s", url, err, b.String())
		}
		u = r.Status.UserInfo
	}
	return resp.StatusCode, u, b.String(), resp.Header.Get("Retry-After")
}

func sameUser(a, b userInfo) bool {
	if a.Username != b.Username || a.UID != b.UID || !slices.Equal(a.Groups, b.Groups) || len(a.Extra) != len(b.Extra) {
		return false
	}
	for k, v := range a.Extra {
		if !slices.Equal(v, b.Extra[k]) {
			return false
		}
	}
	return true
}

// TestIdentityEqualsTheApiserversOwn: the user an apiserver sees through the front (SelfSubjectReview:
// name, UID, groups, extra) equals the one it sees directly, for client certificates signed by the
// cluster CA (several O with system:masters not last, a UID attribute, no O, an empty O, two UIDs)
// and a token. Where the front cannot carry the identity exactly it answers 503 with Retry-After
// (never less or different identity), and where the apiserver refuses (401) the front answers the
// same. Both apiservers (1.35, 1.36) are asked directly and must agree first.
func TestIdentityEqualsTheApiserversOwn(t *testing.T) {
	e := setup(t)
	p := e.tb.PKI
	uid := func(v string) pkix.AttributeTypeAndValue { return pkix.AttributeTypeAndValue{Type: uidOID, Value: v} }
	// An O of its own RDN (pkix.Name.Organization puts every O into one multi-valued RDN, which DER
	// sorts: "system:masters" would come last).
	org := func(v string) pkix.AttributeTypeAndValue {
		return pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: v}
	}
	certs := []struct {
		name string
		o    testbed.CertOptions
	}{
		{"groups, system:masters not last", testbed.CertOptions{CommonName: "carol", ExtraNames: []pkix.AttributeTypeAndValue{org("dev"), org("system:masters"), org("ops")}}},
		{"several O in one RDN", testbed.CertOptions{CommonName: "hugo", Organization: []string{"system:masters", "dev"}}},
		{"a UID", testbed.CertOptions{CommonName: "dave", Organization: []string{"dev"}, ExtraNames: []pkix.AttributeTypeAndValue{uid("dave-uid-0001")}}},
		{"no O", testbed.CertOptions{CommonName: "frank"}},
		{"an empty O", testbed.CertOptions{CommonName: "erin", Organization: []string{"", "dev"}}},
		{"two UIDs", testbed.CertOptions{CommonName: "gina", ExtraNames: []pkix.AttributeTypeAndValue{uid("a"), uid("b")}}},
		{"non-ASCII, commas and a plus", testbed.CertOptions{CommonName: "Zoë, Q+A", Organization: []string{"équipe", "a,b"}}},
	}
	directs := []string{e.tb.MustApiserver("old").URL(), e.tb.MustApiserver("new").URL()}
	figures := map[string]any{}
	check := func(name string, c *http.Client, token string) {
		t.Helper()
		code, want, body, _ := review(t, c, directs[0], token)
		for _, d := range directs[1:] {
			if code2, other, body2, _ := review(t, c, d, token); code2 != code || !sameUser(want, other) {
				t.Fatalf("%s: the apiservers disagree (%d %+v %.200s / %d %+v %.200s): the test is wrong", name, code, want, body, code2, other, body2)
			}
		}
		// Through the front, a few times: it balances over both apiservers.
		got := map[string]int{}
		for range 4 {
			fcode, u, fbody, retry := review(t, c, e.f.URL, token)
			switch {
			case fcode == code && (code != http.StatusCreated || sameUser(u, want)):
				got["equal"]++
			case fcode == http.StatusServiceUnavailable && retry != "" && strings.Contains(fbody, `"kind":"Status"`):
				got["refused 503"]++
			default:
				got["different"]++
				t.Errorf("%s: through the front %d %+v (%.300s), directly %d %+v", name, fcode, u, fbody, code, want)
			}
		}
		t.Logf("%s: directly %d %+v; through the front %v", name, code, want, got)
		figures[name] = map[string]any{"direct_status": code, "direct_user": want, "front": got}
	}
	for i, tc := range certs {
		pair, err := p.Issue(p.ClusterCA(), "identity-"+string(rune('a'+i)), tc.o)
		if err != nil {
			t.Fatal(err)
		}
		check(tc.name, httpsClient(t, e.tb, &pair), "")
	}
	check("a token", httpsClient(t, e.tb, nil), testbed.AdminToken)
	carol := figures["groups, system:masters not last"].(map[string]any)["front"].(map[string]int)
	if carol["equal"] == 0 {
		t.Error("the plain certificate was never given its identity through the front: nothing was compared")
	}
	writeResults(t, e, figures)
}

// identityClient is one long-lived client: every request rides one connection (HTTP/2), and dials
// are counted, so a figure can say the connection survived.
type identityClient struct {
	c     *http.Client
	dials atomic.Int64
}

func newIdentityClient(t *testing.T, tb *testbed.Testbed, cert *testbed.CertPair) *identityClient {
	t.Helper()
	tc := clientTLS(t, tb, cert)
	ic := &identityClient{}
	d := &net.Dialer{Timeout: 5 * time.Second}
	ic.c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ic.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
	return ic
}

// identityLoad runs certificate and token clients against url until stopped, each kind on its own
// long-lived connection, and counts statuses per kind and per window.
type identityLoad struct {
	mu    sync.Mutex
	calls []identityCall
	stop  chan struct{}
	wg    sync.WaitGroup
}

type identityCall struct {
	kind  string // "certificate" or "token"
	start time.Time
	code  int // 0: transport error
	err   string
}

func startIdentityLoad(t *testing.T, url string, cert, token *identityClient) *identityLoad {
	t.Helper()
	l := &identityLoad{stop: make(chan struct{})}
	for w := range 4 {
		kind, ic, tok := "certificate", cert, ""
		if w%2 == 1 {
			kind, ic, tok = "token", token, testbed.AdminToken
		}
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				code, body, err := do(t, ic.c, http.MethodGet, url+"/api/v1/namespaces?limit=5", tok)
				c := identityCall{kind: kind, start: start, code: code}
				if err != nil {
					c.err = err.Error()
				} else if code != http.StatusOK {
					c.err = body
				}
				l.mu.Lock()
				l.calls = append(l.calls, c)
				l.mu.Unlock()
				if code == 0 {
					time.Sleep(20 * time.Millisecond) // pacing: a failed dial answers at once
				}
			}
		})
	}
	return l
}

func (l *identityLoad) halt() []identityCall {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// tallyIdentity counts calls of kind started in [from, to) by status ("0" a transport error), and
// how many were 401 or 403.
func tallyIdentity(calls []identityCall, kind string, from, to time.Time) (map[int]int, int) {
	by := map[int]int{}
	denied := 0
	for _, c := range calls {
		if c.kind != kind || c.start.Before(from) || !c.start.Before(to) {
			continue
		}
		by[c.code]++
		if c.code == http.StatusUnauthorized || c.code == http.StatusForbidden {
			denied++
		}
	}
	return by, denied
}

// TestCertificateIdentityWithoutExtProc: certificate clients on one long-lived connection keep their
// identity while ext_proc is away: (1) through a node's front while that node's skewgate is stopped
// for 5 s and started again, (2) through a front whose ext_proc accepts connections and never
// answers (every request waits for the message timeout and fails open), (3) and whose ext_proc
// refuses connections. Token clients beside them are the control. Target: no 401 or 403 at all.
func TestCertificateIdentityWithoutExtProc(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	figures := map[string]any{}
	admin := tb.PKI.Admin
	phase := func(name, url string, down, up func(), proven func() int64, away time.Duration) {
		t.Helper()
		cert, token := newIdentityClient(t, tb, &admin), newIdentityClient(t, tb, nil)
		l := startIdentityLoad(t, url, cert, token)
		time.Sleep(time.Second) // traffic with ext_proc there first
		before := proven()
		from := time.Now()
		down()
		time.Sleep(away)
		up()
		to := time.Now()
		time.Sleep(2 * time.Second) // and back
		calls := l.halt()
		f := map[string]any{"away_ms": ms(to.Sub(from)), "proof": proven() - before,
			"certificate_dials": cert.dials.Load(), "token_dials": token.dials.Load()}
		for _, kind := range []string{"certificate", "token"} {
			all, deniedAll := tallyIdentity(calls, kind, time.Time{}, time.Now().Add(time.Hour))
			away, denied := tallyIdentity(calls, kind, from, to)
			t.Logf("%s, %s clients: while away %v (401/403: %d), whole phase %v (401/403: %d)", name, kind, away, denied, all, deniedAll)
			f[kind] = map[string]any{"while_away_by_status": away, "while_away_401_403": denied,
				"by_status": all, "denied_401_403": deniedAll}
			if deniedAll != 0 {
				t.Errorf("%s: %d %s requests got 401 or 403", name, deniedAll, kind)
			}
			if away[http.StatusOK] == 0 {
				t.Errorf("%s: no %s request succeeded while ext_proc was away: the phase proves nothing", name, kind)
			}
		}
		for _, c := range calls {
			if c.code != http.StatusOK {
				t.Logf("%s: %s %s: %d %.200s", name, c.kind, c.start.Format(time.StampMilli), c.code, c.err)
				break
			}
		}
		if proven()-before == 0 {
			t.Errorf("%s: ext_proc was never out of the path: the phase proves nothing", name)
		}
		figures[name] = f
	}

	// (1) A node's own skewgate stopped and started again.
	n := newNodes(t, tb, false, "new")[0]
	startNode(t, n)
	var stops atomic.Int64
	phase("skewgate stopped 5 s and restarted", n.URL, func() {
		if err := n.StopSkewgate(); err != nil {
			t.Errorf("skewgate ended with %v", err)
		}
		stops.Add(1)
	}, func() {
		if err := n.StartSkewgate(); err != nil {
			t.Fatal(err)
		}
	}, stops.Load, 5*time.Second)

	// (2), (3) A front whose ext_proc hangs, then refuses.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Host: 7, Switches: true,
		Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)
	back := func() { f.ExtProc.Set(front.Forward) }
	phase("ext_proc hangs", f.URL, func() { f.ExtProc.Set(front.Hang) }, back, f.ExtProc.Held.Load, 5*time.Second)
	phase("ext_proc refuses", f.URL, func() { f.ExtProc.Set(front.Refuse) }, back, f.ExtProc.Refused.Load, 5*time.Second)
	writeResults(t, &env{tb: tb, f: f}, figures)
}
