package discovery

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/test/testbed"

	"github.com/skewgate/skewgate/openapi"
)

// TestTestbedOpenAPI runs discovery's OpenAPI fetches against real v1.35.4 and v1.36.3 apiservers:
// their indexes and documents pass the integrity checks, and a new CRD's group-version reaches both
// indexes within seconds. (The Topology half of this scenario is test/flow's TestTestbedTopology.)
func TestTestbedOpenAPI(t *testing.T) {
	tb := testbed.StartT(t, testbed.Config{})
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	// The informers talk to old, which stays up; in a cluster they use the kubeconfig's address.
	cfg := tb.RESTConfig(old.URL(), testbed.AdminByToken)
	subnet := netip.PrefixFrom(netip.MustParseAddr(neu.IP.String()), 24).Masked()
	c, err := New(Config{
		Client:        kubernetes.NewForConfigOrDie(cfg),
		Metadata:      metadata.NewForConfigOrDie(cfg),
		Upstream:      cfg,
		Static:        []StaticUpstream{{Name: "old", Address: old.Address()}},
		Policy:        AddressPolicy{CIDRs: []netip.Prefix{subnet}},
		ProbeInterval: 200 * time.Millisecond,
		Logger:        zaptest.NewLogger(t),
		Registry:      prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runController(t, c)
	waitForWithin(t, c, time.Minute, "both upstreams with capabilities", func(tp *Topology) bool {
		o, ok1 := tp.Upstream("old")
		n, ok2 := tp.Upstream("new")
		return ok1 && ok2 && o.Capabilities && n.Capabilities
	})
	for _, name := range []string{"old", "new"} {
		poll(t, 30*time.Second, name+"'s OpenAPI index", func() bool { return c.openapi.Index(name) != nil })
		idx := c.openapi.Index(name)
		for _, key := range []string{"api/v1", keyApps, keyAdmission} {
			if !openapi.IsSHA512Hex(idx.Keys[key]) {
				t.Errorf("%s: OpenAPI index hash of %s: %q", name, key, idx.Keys[key])
			}
		}
	}
	// A real apiserver's document passes the integrity checks (SHA-512 of the body = hash = ETag):
	// admissionregistration.k8s.io/v1 from both, through a Store of the test's own (the Topology
	// routes the key to new, so the controller's Store wants nothing).
	store := newOpenAPIStore(Config{MaxOpenAPIBytes: 64 << 20, MaxDocumentBytes: 8 << 20, RequestTimeout: 30 * time.Second, Clock: clock.RealClock{}},
		newMetrics(prometheus.NewRegistry()), nil)
	getters := map[string]openapi.Getter{}
	for name, addr := range map[string]string{"old": old.Address(), "new": neu.Address()} {
		f, err := newFetcher(cfg, addr, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		getters[name] = f.getOpenAPI
		store.Add(name)
		store.Fetch(ctx, name, f.getOpenAPI, zaptest.NewLogger(t))
	}
	store.Apply(map[string][]string{"old": {keyAdmission}, "new": {keyAdmission}}, func(string) bool { return true })
	for name, get := range getters {
		store.Fetch(ctx, name, get, zaptest.NewLogger(t))
	}
	oldAdm, newAdm := store.Document("old", keyAdmission), store.Document("new", keyAdmission)
	if oldAdm == nil || newAdm == nil {
		t.Fatalf("admissionregistration.k8s.io/v1 held: old %v, new %v", oldAdm != nil, newAdm != nil)
	}
	if oldAdm.Hash == newAdm.Hash || strings.Contains(string(oldAdm.JSON), "mutatingadmissionpolicies") ||
		!strings.Contains(string(newAdm.JSON), "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies") {
		t.Errorf("admissionregistration.k8s.io/v1: old %.16s… (%d bytes), new %.16s… (%d bytes); want mutatingadmissionpolicies only in new's",
			oldAdm.Hash, len(oldAdm.JSON), newAdm.Hash, len(newAdm.JSON))
	}

	// A new CRD's group-version reaches both indexes within seconds: the CRD event refetches at once
	// and 2 s later, when the apiservers have published its OpenAPI (the poll is every 30 s).
	crdKey := "apis/openapi.skewgate.test/v1"
	created := time.Now()
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(crdGVR).Create(ctx, widgetCRD(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old", "new"} {
		poll(t, 10*time.Second, name+"'s index listing the new CRD's group-version", func() bool {
			_, ok := c.openapi.Index(name).Keys[crdKey]
			return ok
		})
	}
	t.Logf("CRD created -> its group-version in both upstreams' OpenAPI indexes: %v", time.Since(created).Round(time.Millisecond))
}

func widgetCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "widgets.openapi.skewgate.test"},
		"spec": map[string]any{
			"group": "openapi.skewgate.test",
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type": "object", "properties": map[string]any{"size": map[string]any{"type": "integer"}},
					}},
				}},
			}},
		},
	}}
}
