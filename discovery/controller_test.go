package discovery

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

const testToken = "discovery-test-token"

// fakeUpstream is an httptest TLS apiserver that serves canned discovery documents.
type fakeUpstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	version  string
	api      []byte
	apis     []byte
	notReady atomic.Bool
	requests atomic.Int64
	notMod   chan struct{} // one value per 304 served
}

func docJSON(t testing.TB, d *Document) []byte {
	t.Helper()
	data, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}, Items: d.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	version, api, apis := f.version, f.api, f.apis
	f.mu.Unlock()
	serveDoc := func(body []byte) {
		if !strings.Contains(r.Header.Get("Accept"), "profile=nopeer") {
			http.Error(w, "want the local view", http.StatusNotAcceptable)
			return
		}
		etag := `"` + docHash(body) + `"`
		if r.Header.Get("If-None-Match") == etag {
			select {
			case f.notMod <- struct{}{}:
			default:
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		w.Header().Set("ETag", etag)
		w.Write(body)
	}
	switch r.URL.Path {
	case "/readyz":
		if f.notReady.Load() {
			http.Error(w, "not ready", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	case "/version":
		json.NewEncoder(w).Encode(map[string]string{"gitVersion": version})
	case "/api":
		serveDoc(api)
	case "/apis":
		serveDoc(apis)
	default:
		http.NotFound(w, r)
	}
}

func docHash(b []byte) string {
	d, _ := ParseDocument(b)
	if d == nil {
		return "bad"
	}
	return d.Hash[:16]
}

func (f *fakeUpstream) set(version string, api, apis []byte) {
	f.mu.Lock()
	f.version, f.api, f.apis = version, api, apis
	f.mu.Unlock()
}

func (f *fakeUpstream) addr() string { return f.srv.Listener.Addr().String() }

func newFakeUpstream(t testing.TB, cert tls.Certificate, version string, api, apis []byte) *fakeUpstream {
	f := &fakeUpstream{notMod: make(chan struct{}, 64)}
	f.set(version, api, apis)
	f.srv = httptest.NewUnstartedServer(f)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// waitFor waits for a published Topology that satisfies ok, driven by the controller's notifications.
func waitFor(t *testing.T, c *Controller, what string, ok func(*Topology) bool) *Topology {
	t.Helper()
	return waitForWithin(t, c, 20*time.Second, what, ok)
}

func waitForWithin(t *testing.T, c *Controller, timeout time.Duration, what string, ok func(*Topology) bool) *Topology {
	t.Helper()
	deadline := time.After(timeout)
	for {
		topo, changed := c.Watch()
		if topo != nil && ok(topo) {
			return topo
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for: %s; last topology version: %v", timeout, what, versionOf(topo))
		}
	}
}

func kubernetesSlice(addr string) *discoveryv1.EndpointSlice {
	ap := netip.MustParseAddrPort(addr)
	port := int32(ap.Port())
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ap.Addr().String()}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}
}

func TestControllerFollowsLeasesReadinessAndPolicy(t *testing.T) {
	pki, cert := testPKI(t)
	old := newFakeUpstream(t, cert, "v1.35.4", docJSON(t, coreDoc()), docJSON(t, apisDoc(false)))
	neu := newFakeUpstream(t, cert, "v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
	hostile := newFakeUpstream(t, cert, "v9.9.9", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))

	now := time.Now()
	client := fake.NewClientset(
		lease("apiserver-old", "old", "", now),               // v1.35: no annotation, matched to static
		lease("apiserver-new", "new", neu.addr(), now),       // v1.36: allowed as a default/kubernetes endpoint
		lease("apiserver-evil", "evil", hostile.addr(), now), // same IP, other port: not allowed
		kubernetesSlice(neu.addr()),
	)
	reg := prometheus.NewRegistry()
	c, err := New(Config{
		Client:             client,
		Upstream:           restFor(t, pki),
		Static:             []StaticUpstream{{Name: "old", Address: old.addr()}},
		TrustEndpointSlice: true,
		ProbeInterval:      10 * time.Millisecond,
		FailureThreshold:   2,
		Registry:           reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runController(t, c)

	mapOnlyOnNew := func(tp *Topology) bool {
		return tp.Decide(keyMAP, "get") == Decision{Action: ActionRoute, Set: "new"}
	}
	topo := waitFor(t, c, "mutatingadmissionpolicies routed to new", mapOnlyOnNew)
	if d := topo.Decide(keyPods, "list"); d.Action != ActionDefault {
		t.Errorf("pods: %+v, want default", d)
	}
	if len(topo.Upstreams) != 2 {
		t.Fatalf("upstreams = %+v, want old and new", topo.Upstreams)
	}
	if u, _ := topo.Upstream("old"); u.Source != SourceLeaseStatic || u.Version != "v1.35.4" || !u.Ready {
		t.Errorf("old = %+v", u)
	}
	if u, _ := topo.Upstream("new"); u.Source != SourceLease || u.Version != "v1.36.3" || u.Address != neu.addr() {
		t.Errorf("new = %+v", u)
	}
	if hostile.requests.Load() != 0 {
		t.Errorf("the hostile Lease address received %d requests", hostile.requests.Load())
	}
	if got := testutil.ToFloat64(c.metrics.rejectedLeases.WithLabelValues(RejectNotAllowed)); got != 1 {
		t.Errorf("rejected leases metric = %v, want 1", got)
	}

	t.Run("not ready gives 503, never 404", func(t *testing.T) {
		neu.notReady.Store(true)
		waitFor(t, c, "new not ready", func(tp *Topology) bool { return tp.Decide(keyMAP, "get").Action == ActionUnavailable })
		neu.notReady.Store(false)
		waitFor(t, c, "new ready again", mapOnlyOnNew)
	})

	t.Run("polling uses ETags", func(t *testing.T) {
		for len(neu.notMod) > 0 {
			<-neu.notMod
		}
		c.refetch("new")
		for range 2 { // /api and /apis
			select {
			case <-neu.notMod:
			case <-time.After(10 * time.Second):
				t.Fatal("no 304 answer for a refetch with If-None-Match")
			}
		}
	})

	t.Run("a broken document keeps the last known capabilities", func(t *testing.T) {
		neu.set("v1.36.3", docJSON(t, coreDoc()), []byte(strings.Repeat("garbage", 10)))
		c.refetch("new")
		topo := waitFor(t, c, "new stale", func(tp *Topology) bool { u, _ := tp.Upstream("new"); return u.Stale })
		if !mapOnlyOnNew(topo) {
			t.Error("stale capabilities were dropped")
		}
		if got := testutil.ToFloat64(c.metrics.fetchErrors.WithLabelValues(ErrContentType)); got < 1 {
			// our fake labels garbage with the discovery content type, so the decoder rejects it
			if testutil.ToFloat64(c.metrics.fetchErrors.WithLabelValues(ErrDecode)) < 1 {
				t.Errorf("no fetch error counted")
			}
		}
		neu.set("v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
		c.refetch("new")
		waitFor(t, c, "new fresh", func(tp *Topology) bool { u, _ := tp.Upstream("new"); return !u.Stale && mapOnlyOnNew(tp) })
	})

	t.Run("a lease that stops being renewed is gone once its apiserver stops answering", func(t *testing.T) {
		l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "apiserver-new", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-31 * time.Second)} // stale
		if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Our view of the Lease may be what is stale: while new answers its probes it stays.
		seen := func() bool {
			for _, x := range c.leases() {
				if x.Name == "apiserver-new" && x.Spec.RenewTime.Time.Before(time.Now().Add(-30*time.Second)) {
					return true
				}
			}
			return false
		}
		poll(t, 10*time.Second, "the informer to see the stale Lease", seen)
		// Wait for a sync that read the stale Lease: new is still there.
		before := syncs(t, reg)
		c.requestSync()
		poll(t, 10*time.Second, "a sync after the stale Lease", func() bool { return syncs(t, reg) > before })
		if u, ok := c.Current().Upstream("new"); !ok || !u.Ready {
			t.Fatalf("new left while it answers its probes: %+v", u)
		}
		neu.notReady.Store(true)
		defer neu.notReady.Store(false)
		topo := waitFor(t, c, "new gone", func(tp *Topology) bool { _, ok := tp.Upstream("new"); return !ok })
		if d := topo.Decide(keyMAP, "get"); d.Action != ActionUnavailable {
			t.Errorf("only the departed upstream served it: want unavailable (503, not 404), got %+v", d)
		}
		if strings.Contains(string(topo.APIs.JSON), "mutatingadmissionpolicies") {
			t.Error("a departed upstream's resources are still in the merged discovery")
		}
	})

	t.Run("deleting the lease of a static upstream keeps the static upstream", func(t *testing.T) {
		if err := client.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, "apiserver-old", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, c, "old static only", func(tp *Topology) bool { u, ok := tp.Upstream("old"); return ok && u.Source == SourceStatic })
	})
}

// TestVersionsNeverRepeat runs a controller through three publishes (ready, not ready, ready again),
// stops it and runs a second one on the same upstream, as a restart of skewgate does. The second
// publishes the same content in the same order, so only the version string tells them apart: no
// version it publishes may be one the first published (Envoy would take it for a snapshot it has).
func TestVersionsNeverRepeat(t *testing.T) {
	pki, cert := testPKI(t)
	up := newFakeUpstream(t, cert, "v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
	ready := func(want bool) func(*Topology) bool {
		return func(tp *Topology) bool { u, ok := tp.Upstream("a"); return ok && u.Ready == want }
	}
	// run publishes three Topologies with one controller and returns every version it published.
	run := func(name string) []string {
		up.notReady.Store(false)
		c, err := New(Config{Upstream: restFor(t, pki), Static: []StaticUpstream{{Name: "a", Address: up.addr()}},
			ProbeInterval: 10 * time.Millisecond, FailureThreshold: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		var mu sync.Mutex
		var versions []string // in publish order, each once
		add := func(v string) {
			mu.Lock()
			defer mu.Unlock()
			for _, x := range versions {
				if x == v {
					return
				}
			}
			versions = append(versions, v)
		}
		seen := make(chan struct{})
		go func() { // every publish closes the Watch channel; fast successive publishes may be missed here
			defer close(seen)
			for {
				topo, changed := c.Watch()
				if topo != nil {
					add(topo.Version)
				}
				select {
				case <-changed:
				case <-ctx.Done():
					return
				}
			}
		}()
		// The three states are three different contents, hence at least three publishes.
		add(waitFor(t, c, name+": a ready", ready(true)).Version)
		up.notReady.Store(true)
		add(waitFor(t, c, name+": a not ready", ready(false)).Version)
		up.notReady.Store(false)
		add(waitFor(t, c, name+": a ready again", ready(true)).Version)
		cancel()
		<-done
		<-seen
		return versions
	}
	first := run("first")
	second := run("restarted")
	t.Logf("versions published: first run %q, after the restart %q", first, second)
	for _, vs := range [][]string{first, second} {
		if len(vs) < 3 {
			t.Fatalf("%d distinct versions for three different Topologies (ready, not ready, ready): %q", len(vs), vs)
		}
	}
	published := map[string]string{}
	for i, vs := range [][]string{first, second} {
		by := []string{"first run", "restarted run"}[i]
		for _, v := range vs {
			if v == "" {
				t.Errorf("%s published an empty version", by)
			}
			if prev, ok := published[v]; ok {
				t.Errorf("version %q published by the %s repeats one of the %s", v, by, prev)
			}
			published[v] = by
		}
	}
}

func TestParseDocumentRejectsBrokenInput(t *testing.T) {
	good := docJSON(t, apisDoc(true))
	// Each is refused as what it is (the fetch error type, a metric label) and names the cause.
	cases := map[string]struct {
		in   []byte
		typ  string
		want string
	}{
		"not json":     {[]byte("<html>hello</html>"), ErrDecode, "invalid character '<'"},
		"wrong kind":   {[]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`), ErrInvalid, `kind "APIGroupList" apiVersion "v1", want APIGroupDiscoveryList`},
		"bad group":    {[]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"../x"}}]}`), ErrInvalid, `bad group name "../x"`},
		"bad version":  {[]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"x"},"versions":[{"version":"V 1"}]}]}`), ErrInvalid, `bad version "V 1"`},
		"bad resource": {[]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"x"},"versions":[{"version":"v1","resources":[{"resource":"a/b"}]}]}]}`), ErrInvalid, `bad resource "a/b"`},
		"truncated":    {good[:len(good)/2], ErrDecode, "unexpected end of JSON input"},
		"wrong type":   {[]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":"x"}`), ErrDecode, "cannot unmarshal string"},
	}
	for name, c := range cases {
		_, err := ParseDocument(c.in)
		if err == nil || errorType(err) != c.typ || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v (type %q), want type %q with %q", name, err, errorType(err), c.typ, c.want)
		}
	}
	if _, err := ParseDocument(good); err != nil {
		t.Errorf("good document rejected: %v", err)
	}
}

// 10 MB of garbage is refused by size before it is parsed.
func TestFetchRefusesHugeDocuments(t *testing.T) {
	pki, cert := testPKI(t)
	garbage := []byte(strings.Repeat("x", 10<<20))
	up := newFakeUpstream(t, cert, "v1", garbage, garbage)
	f, err := newFetcher(restFor(t, pki), up.addr(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.document(context.Background(), "/apis", nil, "")
	if errorType(err) != ErrTooLarge {
		t.Fatalf("err = %v, want %s", err, ErrTooLarge)
	}
}

// An upstream whose certificate is not for kubernetes.default.svc or not from the CA is refused.
func TestFetchVerifiesUpstreamTLS(t *testing.T) {
	pki, _ := testPKI(t)
	_, otherCert := testPKI(t) // signed by another CA
	up := newFakeUpstream(t, otherCert, "v1", docJSON(t, coreDoc()), docJSON(t, coreDoc()))
	f, err := newFetcher(restFor(t, pki), up.addr(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.version(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
	if up.requests.Load() != 0 {
		t.Fatal("a request reached an unverified upstream")
	}
	insecure := restFor(t, pki)
	insecure.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
	if _, err := newFetcher(insecure, up.addr(), 1); err == nil || !strings.Contains(err.Error(), "refusing an insecure TLS config") {
		t.Fatalf("insecure upstream TLS: error %v, want it refused as insecure", err)
	}
}

func versionOf(t *Topology) string {
	if t == nil {
		return "none"
	}
	return t.Version
}

// runController runs c until the test ends and returns a context for the test's own calls.
func runController(t testing.TB, c *Controller) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// TestPublishesBeforeInformersSync: with the Lease informers' apiserver unreachable (a kubeconfig
// that points at the front itself), the static upstreams still make a Topology after InitialTimeout.
func TestPublishesBeforeInformersSync(t *testing.T) {
	pki, cert := testPKI(t)
	up := newFakeUpstream(t, cert, "v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
	unreachable := restFor(t, pki)
	unreachable.Host = "https://127.0.0.1:1" // nothing listens on port 1
	c, err := New(Config{
		Client:         kubernetes.NewForConfigOrDie(unreachable),
		Upstream:       restFor(t, pki),
		Static:         []StaticUpstream{{Name: "cp-1", Address: up.addr()}},
		ProbeInterval:  100 * time.Millisecond,
		InitialTimeout: 500 * time.Millisecond,
		Logger:         zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	waitFor(t, c, "cp-1 from the static list", func(tp *Topology) bool {
		u, ok := tp.Upstream("cp-1")
		return ok && u.Ready && u.Capabilities
	})
}

// TestStaleLeaseLeavesWithoutAnotherEvent: an apiserver SIGKILLed leaves its Lease behind and sends
// nothing more; after its probes failed, the only thing left to notice is the Lease going stale, which
// no informer reports. The controller must wake up for it by itself.
func TestStaleLeaseLeavesWithoutAnotherEvent(t *testing.T) {
	pki, cert := testPKI(t)
	neu := newFakeUpstream(t, cert, "v1.36.3", docJSON(t, coreDoc()), docJSON(t, apisDoc(true)))
	client := fake.NewClientset(lease("apiserver-new", "new", neu.addr(), time.Now()), kubernetesSlice(neu.addr()))
	c, err := New(Config{
		Client:             client,
		Upstream:           restFor(t, pki),
		TrustEndpointSlice: true,
		StaleAfter:         3 * time.Second,
		ProbeInterval:      10 * time.Millisecond,
		FailureThreshold:   1,
		Registry:           prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	waitFor(t, c, "new ready", func(tp *Topology) bool { u, ok := tp.Upstream("new"); return ok && u.Ready })
	neu.notReady.Store(true) // the last event: from here on nothing changes but the clock
	waitFor(t, c, "new not ready", func(tp *Topology) bool { u, ok := tp.Upstream("new"); return ok && !u.Ready })
	start := time.Now()
	waitForWithin(t, c, 10*time.Second, "the stale Lease out of the topology", func(tp *Topology) bool {
		_, ok := tp.Upstream("new")
		return !ok
	})
	if waited := time.Since(start); waited > 4*time.Second {
		t.Errorf("left %v after it stopped answering; the Lease went stale within 3s", waited)
	}
}
