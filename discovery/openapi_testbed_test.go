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

	"github.com/skewgate/skewgate/test/testbed"
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
	// Whatever Build decides, fetch admissionregistration.k8s.io/v1's OpenAPI from both: a real
	// apiserver's document must pass the integrity checks (SHA-512 of the body = hash = ETag).
	c.openAPIWants = func(*Topology) map[string][]string {
		return map[string][]string{"old": {keyAdmission}, "new": {keyAdmission}}
	}
	ctx := runController(t, c)
	waitForWithin(t, c, time.Minute, "both upstreams with capabilities", func(tp *Topology) bool {
		o, ok1 := tp.Upstream("old")
		n, ok2 := tp.Upstream("new")
		return ok1 && ok2 && o.Capabilities && n.Capabilities
	})
	for _, name := range []string{"old", "new"} {
		poll(t, 30*time.Second, name+"'s OpenAPI index", func() bool { return c.openAPIIndexOf(name) != nil })
		idx := c.openAPIIndexOf(name)
		for _, key := range []string{"api/v1", keyApps, keyAdmission} {
			if !isSHA512Hex(idx.Keys[key]) {
				t.Errorf("%s: OpenAPI index hash of %s: %q", name, key, idx.Keys[key])
			}
		}
		poll(t, 30*time.Second, name+"'s admissionregistration.k8s.io/v1 document", func() bool { return heldDoc(c, name, keyAdmission) != nil })
	}
	oldAdm, newAdm := heldDoc(c, "old", keyAdmission), heldDoc(c, "new", keyAdmission)
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
			_, ok := c.openAPIIndexOf(name).Keys[crdKey]
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
