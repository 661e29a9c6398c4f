package flow

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/openapi"
	"github.com/skewgate/skewgate/test/testbed"
)

const (
	keyCore      = "api/v1"
	keyApps      = "apis/apps/v1"
	keyAdmission = "apis/admissionregistration.k8s.io/v1"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestTestbedOpenAPI runs OpenAPI v3 against real v1.35.4 and v1.36.3 apiservers: their indexes
// and documents pass the openapi package's integrity checks, discovery decides each key from the
// hashes they publish, and a new CRD's group-version reaches both indexes, as discovery sees them,
// within seconds. (The Topology half of this scenario is TestTestbedTopology.)
func TestTestbedOpenAPI(t *testing.T) {
	tb := testbed.StartT(t, testbed.Config{})
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	// The informers talk to old, which stays up; in a cluster they use the kubeconfig's address.
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
		PollInterval:  time.Hour,
		Logger:        zaptest.NewLogger(t),
		Registry:      reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := startController(t, c)
	waitFor(t, c, time.Minute, "both upstreams with capabilities", func(tp *discovery.Topology) bool {
		o, ok1 := tp.Upstream("old")
		n, ok2 := tp.Upstream("new")
		return ok1 && ok2 && o.Capabilities && n.Capabilities
	})

	// A real apiserver's index names SHA-512 hashes, and its documents pass the integrity checks
	// (SHA-512 of the body = hash = ETag): admissionregistration.k8s.io/v1 from both, through a Store
	// of the test's own (the Topology routes the key to new, so the controller's Store wants nothing).
	sm := newStoreMetrics()
	store := openapi.NewStore(openapi.StoreConfig{MaxBytes: 64 << 20, MaxDocumentBytes: 8 << 20, RequestTimeout: 30 * time.Second,
		Clock: clock.RealClock{}, Metrics: sm, ErrorType: errorType})
	getters := map[string]openapi.Getter{"old": openAPIGetter(t, cfg, old.Address()), "new": openAPIGetter(t, cfg, neu.Address())}
	for name, get := range getters {
		store.Add(name)
		store.Fetch(ctx, name, get, zaptest.NewLogger(t))
		idx := store.Index(name)
		if idx == nil {
			t.Fatalf("%s: no OpenAPI index fetched", name)
		}
		for _, key := range []string{keyCore, keyApps, keyAdmission} {
			if !openapi.IsSHA512Hex(idx.Keys[key]) {
				t.Errorf("%s: OpenAPI index hash of %s: %q", name, key, idx.Keys[key])
			}
		}
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
	if fetched, failed := sm.counts(); len(failed) != 0 || fetched[openapi.WhatIndex+"/"+openapi.ResultOK] != 2 || fetched[openapi.WhatDocument+"/"+openapi.ResultOK] != 2 {
		t.Errorf("the test's Store: fetched %v, failed %v; want 2 indexes and 2 documents, no failure", fetched, failed)
	}

	// The controller decides each key from the hashes the apiservers publish: an agreed key passes
	// through under its hash; admissionregistration.k8s.io/v1 (mutatingadmissionpolicies on new only)
	// goes to new under new's hash.
	oldIdx, newIdx := store.Index("old"), store.Index("new")
	waitFor(t, c, 30*time.Second, "the OpenAPI decisions of both indexes", func(tp *discovery.Topology) bool {
		return tp.DecideOpenAPI(keyAdmission) == discovery.OpenAPIDecision{Action: discovery.ActionRoute, Set: "new", Hash: newIdx.Keys[keyAdmission]}
	})
	topo := c.Current()
	for _, key := range []string{keyCore, keyApps} {
		d := topo.DecideOpenAPI(key)
		if agreed := oldIdx.Keys[key] == newIdx.Keys[key]; agreed && d != (discovery.OpenAPIDecision{Action: discovery.ActionDefault, Hash: oldIdx.Keys[key]}) ||
			!agreed && d.Hash != oldIdx.Keys[key] && d.Hash != newIdx.Keys[key] {
			t.Errorf("%s: decided %+v; old publishes %.16s…, new %.16s…", key, d, oldIdx.Keys[key], newIdx.Keys[key])
		}
	}
	for _, typ := range []string{discovery.ErrIntegrity, discovery.ErrInvalid, discovery.ErrDecode, discovery.ErrMoved} {
		for _, what := range []string{openapi.WhatIndex, openapi.WhatDocument} {
			if n := counter(t, reg, "skewgate_discovery_openapi_fetches_total", map[string]string{"what": what, "result": typ}); n != 0 {
				t.Errorf("the controller's OpenAPI fetches: %v %s results %s", n, what, typ)
			}
		}
	}

	// A new CRD's group-version reaches each upstream's index, as discovery holds it, within seconds:
	// the CRD event refetches at once and 2 s later, when the apiservers have published its OpenAPI
	// (the periodic poll is an hour here, so nothing else refetches). The Topology routes a key to
	// the newest ready group that lists it, so a first CRD shows new's index; then, new killed (and
	// the fetches that follow done), a second CRD is routed to old under old's hash only once
	// discovery holds old's index listing it: new's index, from before, does not list it.
	created := createCRD(t, ctx, cfg, "openapi.skewgate.test")
	crdKey := "apis/openapi.skewgate.test/v1"
	topo = waitFor(t, c, 10*time.Second, "new's index listing the first CRD's group-version", func(tp *discovery.Topology) bool {
		d := tp.DecideOpenAPI(crdKey)
		return d.Action == discovery.ActionRoute && d.Set == "new" && openapi.IsSHA512Hex(d.Hash)
	})
	t.Logf("CRD created -> its group-version in new's OpenAPI index: %v", time.Since(created).Round(time.Millisecond))
	publishes := func(name, key string, topo *discovery.Topology) {
		t.Helper()
		store.Fetch(ctx, name, getters[name], zaptest.NewLogger(t))
		if h, d := store.Index(name).Keys[key], topo.DecideOpenAPI(key); h != d.Hash {
			t.Errorf("%s publishes %s under %.16s…, the Topology routes it to %s under %.16s…", name, key, h, d.Set, d.Hash)
		}
	}
	publishes("new", crdKey, topo)

	if err := tb.Kill("new"); err != nil {
		t.Fatal(err)
	}
	// new unready: old's OpenAPI is fetched again for the documents the Topology now wants from it,
	// and the first key goes to old. The second CRD comes after that fetch.
	waitFor(t, c, 30*time.Second, "the first CRD's key routed to old", func(tp *discovery.Topology) bool {
		d := tp.DecideOpenAPI(crdKey)
		return d.Action == discovery.ActionRoute && d.Set == "old"
	})
	created = createCRD(t, ctx, cfg, "openapi2.skewgate.test")
	crdKey = "apis/openapi2.skewgate.test/v1"
	topo = waitFor(t, c, 10*time.Second, "old's index listing the second CRD's group-version", func(tp *discovery.Topology) bool {
		d := tp.DecideOpenAPI(crdKey)
		return d.Action == discovery.ActionRoute && d.Set == "old" && openapi.IsSHA512Hex(d.Hash)
	})
	t.Logf("CRD created -> its group-version in old's OpenAPI index: %v", time.Since(created).Round(time.Millisecond))
	publishes("old", crdKey, topo)
}

// createCRD creates the CRD of widgets in group and returns when.
func createCRD(t *testing.T, ctx context.Context, cfg *rest.Config, group string) time.Time {
	t.Helper()
	created := time.Now()
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(crdGVR).Create(ctx, widgetCRD(group), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}

func widgetCRD(group string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "widgets." + group},
		"spec": map[string]any{
			"group": group,
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
