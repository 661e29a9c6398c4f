package flow

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/openapi"
	"github.com/skewgate/skewgate/test/testbed"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

const (
	evilGroup = "evil.skewgate.test"
	evilKey   = "apis/" + evilGroup + "/v1"
	// hostileNewCN names the proxy client certificate the "new" apiserver presents to aggregated
	// servers, so the hostile server can answer the two apiservers differently.
	hostileNewCN = "hostile-new-proxy"
)

// hostileAggregated is an aggregated API server that forces a merge of its own key and then answers
// skewgate's user alone with documents no other client gets, each under a SHA-512 it computed itself:
// the old apiserver sees resource widgets, the new one gadgets (nobody serves the whole group-version),
// and each its own index hash.
type hostileAggregated struct {
	skewgateUser string

	mu      sync.Mutex
	docReqs map[string]int // document requests by X-Remote-User
}

func (h *hostileAggregated) doc(apiserver string, forSkewgate bool) []byte {
	res, who := "widgets", "everyone"
	if apiserver == "new" {
		res = "gadgets"
	}
	if forSkewgate {
		who = "skewgate-only"
	}
	return fmt.Appendf(nil, `{"openapi":"3.0.0","info":{"title":"%s","version":"%s"},"paths":{"/apis/%s/v1/%s":{"get":{"description":"%s"}}},"components":{"schemas":{"test.skewgate.evil.v1.Widget":{"description":"%s","x-kubernetes-group-version-kind":[{"group":"%s","kind":"Widget","version":"v1"}]}}}}`,
		who, apiserver, evilGroup, res, who, who, evilGroup)
}

func (h *hostileAggregated) requests(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.docReqs[user]
}

func (h *hostileAggregated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	apiserver := "old"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && strings.HasPrefix(r.TLS.PeerCertificates[0].Subject.CommonName, hostileNewCN) {
		apiserver = "new"
	}
	switch r.URL.Path {
	case "/apis/" + evilGroup + "/v1":
		res := map[string]string{"old": "widgets", "new": "gadgets"}[apiserver]
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"%s/v1","resources":[{"name":"%s","singularName":"%s","namespaced":true,"kind":"Widget","verbs":["get","list"]}]}`,
			evilGroup, res, strings.TrimSuffix(res, "s"))
	case "/openapi/v3":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"paths":{%q:{"serverRelativeURL":"/openapi/v3/%s?hash=%s"}}}`, evilKey, evilKey, openapi.Hash(h.doc(apiserver, true)))
	case "/openapi/v3/" + evilKey:
		user := r.Header.Get("X-Remote-User")
		h.mu.Lock()
		h.docReqs[user]++
		h.mu.Unlock()
		body := h.doc(apiserver, user == h.skewgateUser)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", strconv.Quote(openapi.Hash(body)))
		w.Write(body)
	default:
		http.NotFound(w, r)
	}
}

// TestTestbedHostileAggregatedAPI registers a hostile aggregated API server with real apiservers. Its
// key needs a merge by every other rule, and it would serve skewgate documents that hash right: the
// front must route the key (the hash one apiserver publishes, never its own bytes), fetch nothing
// from it, and decide every other key as before.
func TestTestbedHostileAggregatedAPI(t *testing.T) {
	certDir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(hostileNewCN, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(certDir, "new-proxy.crt"), filepath.Join(certDir, "new-proxy.key")
	if err := os.WriteFile(crt, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tb := testbed.StartT(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{
		{Name: "old", Version: testbed.OldVersion},
		// Repeated flags: the last one wins.
		{Name: "new", Version: testbed.NewVersion, ExtraFlags: []string{"--proxy-client-cert-file=" + crt, "--proxy-client-key-file=" + key}},
	}})
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")

	hostile := &hostileAggregated{skewgateUser: testbed.AdminUser, docReqs: map[string]int{}}
	srv := httptest.NewUnstartedServer(hostile)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	portN, _ := strconv.Atoi(port)

	cfg := tb.RESTConfig(old.URL(), testbed.AdminByToken)
	subnet := netip.PrefixFrom(netip.MustParseAddr(neu.IP.String()), 24).Masked()
	reg := prometheus.NewRegistry()
	c, err := discovery.New(discovery.Config{
		Client:        kubernetes.NewForConfigOrDie(cfg),
		Metadata:      metadata.NewForConfigOrDie(cfg),
		Upstream:      cfg,
		Static:        []discovery.StaticUpstream{{Name: "old", Address: old.Address()}},
		Policy:        discovery.AddressPolicy{CIDRs: []netip.Prefix{subnet}},
		ProbeInterval: 200 * time.Millisecond,
		PollInterval:  2 * time.Second,
		Logger:        zaptest.NewLogger(t),
		Registry:      reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := startController(t, c)
	// What each apiserver publishes, through a Store of the test's own: it fetches indexes only.
	store := openapi.NewStore(openapi.StoreConfig{MaxBytes: 64 << 20, MaxDocumentBytes: 8 << 20, RequestTimeout: 30 * time.Second,
		Clock: clock.RealClock{}, Metrics: newStoreMetrics(), ErrorType: errorType})
	getters := map[string]openapi.Getter{"old": openAPIGetter(t, cfg, old.Address()), "new": openAPIGetter(t, cfg, neu.Address())}
	published := func() map[string]*openapi.Index {
		idx := map[string]*openapi.Index{}
		for name, get := range getters {
			store.Add(name)
			store.Fetch(ctx, name, get, zaptest.NewLogger(t))
			if idx[name] = store.Index(name); idx[name] == nil {
				t.Fatalf("%s: no OpenAPI index fetched", name)
			}
		}
		return idx
	}
	var idx map[string]*openapi.Index // fetched once the hostile APIService is decided
	why := "no Topology"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last OpenAPI decisions: %s", why)
			for name, idx := range published() {
				t.Logf("%s publishes %s under %.16s…", name, evilKey, idx.Keys[evilKey])
			}
		}
	})
	before := waitFor(t, c, time.Minute, "both upstreams with OpenAPI", func(tp *discovery.Topology) bool {
		o, ok1 := tp.Upstream("old")
		n, ok2 := tp.Upstream("new")
		if !ok1 || !ok2 || !o.Ready || !n.Ready || !o.Capabilities || !n.Capabilities {
			why = "not both ready and capable"
			return false
		}
		why = fetchedFromBoth(t, reg)
		return why == "" && tp.OpenAPIIndex() != nil
	})

	// The apiservers label every APIService they register for themselves (built-in groups, CRDs).
	apiServiceList := func() []*metav1.PartialObjectMetadata {
		l, err := metadata.NewForConfigOrDie(cfg).Resource(apiServices).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]*metav1.PartialObjectMetadata, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out
	}
	if agg := openapi.AggregatedAPIs(apiServiceList()); len(agg) != 0 {
		t.Errorf("aggregated APIs of plain apiservers: %v, want none", agg)
	}

	// An ExternalName Service: the aggregator resolves it to the hostile server's address itself.
	kc := kubernetes.NewForConfigOrDie(cfg)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: host}}
	if _, err := kc.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + evilGroup},
		"spec": map[string]any{
			"group": evilGroup, "version": "v1", "insecureSkipTLSVerify": true,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": "default", "name": "hostile", "port": int64(portN)},
		},
	}}
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(apiServices).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if agg := openapi.AggregatedAPIs(apiServiceList()); !slices.Equal(agg, []string{evilGroup + "/v1"}) {
		t.Errorf("aggregated APIs %v, want %s/v1", agg, evilGroup)
	}
	widgets := discovery.ResourceKey{Group: evilGroup, Version: "v1", Resource: "widgets"}
	gadgets := discovery.ResourceKey{Group: evilGroup, Version: "v1", Resource: "gadgets"}
	// Decided: merged from what skewgate was served (what a front without the rule does once it has
	// fetched both documents), or routed only. Either needs both indexes, as discovery holds them, to
	// list the key under two hashes: one hash would be routed to its own upstreams, no merge needed.
	after := waitFor(t, c, 3*time.Minute, "the hostile group-version decided", func(tp *discovery.Topology) bool {
		d := tp.DecideOpenAPI(evilKey)
		why = fmt.Sprintf("%s: %+v (routed only: %q); widgets %+v, gadgets %+v", evilKey, d, tp.OpenAPIRoutedOnly()[evilKey], tp.Decide(widgets, "list"), tp.Decide(gadgets, "list"))
		return tp.Decide(widgets, "list").Set == "old" && tp.Decide(gadgets, "list").Set == "new" &&
			(d.Action == discovery.ActionServe || tp.OpenAPIRoutedOnly()[evilKey] != "")
	})
	// Both apiservers list the hostile key, each with the hash of the document it would give skewgate.
	idx = published()
	for _, name := range []string{"old", "new"} {
		if got, want := idx[name].Keys[evilKey], openapi.Hash(hostile.doc(name, true)); got != want {
			t.Errorf("%s's index lists %s under %.16s…, want the hostile server's %.16s…", name, evilKey, got, want)
		}
	}

	d := after.DecideOpenAPI(evilKey)
	if d.Action != discovery.ActionRoute || after.OpenAPIMerged(evilKey) != nil {
		t.Errorf("%s: %+v, merged %v; want routed", evilKey, d, after.OpenAPIMerged(evilKey) != nil)
	}
	if r := after.OpenAPIRoutedOnly()[evilKey]; !strings.Contains(r, "aggregated APIService") {
		t.Errorf("%s: routed only %q, want for an aggregated APIService", evilKey, r)
	}
	if d.Hash != idx["old"].Keys[evilKey] && d.Hash != idx["new"].Keys[evilKey] {
		t.Errorf("the front's index names %.16s…, no apiserver publishes it", d.Hash)
	}
	// Nothing fetched, so nothing held: a document is held only once discovery fetched it, as
	// skewgate's user (shared under one hash or not).
	if n := hostile.requests(testbed.AdminUser); n != 0 {
		t.Errorf("skewgate fetched the hostile document %d times", n)
	}
	// Nothing of another key changed.
	for _, kd := range before.OpenAPIDecisions() {
		if got := after.DecideOpenAPI(kd.Key); got != kd.OpenAPIDecision {
			t.Errorf("%s: %+v, before the hostile APIService %+v", kd.Key, got, kd.OpenAPIDecision)
		}
	}
	var front struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(after.OpenAPIIndex().JSON, &front); err != nil {
		t.Fatal(err)
	}
	if _, ok := front.Paths[evilKey]; !ok {
		t.Errorf("the front's index lacks %s", evilKey)
	}
	// The attack is real: another user, through the same apiserver and under the same hash, gets
	// other bytes than skewgate would have.
	other, err := rest.HTTPClientFor(tb.RESTConfig(old.URL(), testbed.LowPrivByToken))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := other.Get(old.URL() + "/openapi/v3/" + evilKey + "?hash=" + idx["old"].Keys[evilKey])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || openapi.Hash(body) == idx["old"].Keys[evilKey] || !strings.Contains(string(body), "everyone") {
		t.Errorf("another user got %s, %d bytes %.60q; want the hostile server's other document", resp.Status, len(body), body)
	}
	t.Logf("hostile key %s: %s to %s; document requests by skewgate %d, by others %d", evilKey, d.Action, d.Set,
		hostile.requests(testbed.AdminUser), hostile.requests(testbed.LowPrivUser))
}
