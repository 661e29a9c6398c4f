package discovery

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// TestOpenAPIRefetchedAfterCRDChange: a CRD event refetches the index at once and again openAPILag
// later on Config.Clock (the apiserver publishes a CRD's OpenAPI about a second after the CRD
// changes); a burst of events moves the late refetch to openAPILag after the last one. The clock is
// a fake one the test steps.
func TestOpenAPIRefetchedAfterCRDChange(t *testing.T) {
	pki, cert := testPKI(t)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), capturedDocs(t, "v1.36.3", keyApps))
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	// Polls far apart: every index request below comes from an event.
	c := openAPIController(t, pki, map[string]string{"a": up.addr()}, func(cfg *Config) {
		cfg.Metadata = meta
		cfg.PollInterval = time.Hour
		cfg.Clock = clk
	})
	poll(t, 10*time.Second, "the index", func() bool { return c.openapi.Index("a") != nil })
	if clk.HasWaiters() {
		t.Fatal("a late refetch is pending before any CRD event")
	}
	crds := meta.Resource(crdGVR).(metadatafake.MetadataClient)
	crd := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	requests := func() int64 { return up.indexReqs.Load() }
	event := func(name string) {
		t.Helper()
		before := requests()
		if _, err := crds.CreateFake(crd(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, "the refetch at the event", func() bool { return requests() > before && clk.HasWaiters() })
	}
	event("crontabs.stable.example.com")
	clk.Step(time.Second)
	event("widgets.stable.example.com")
	// One late refetch pending: the second event moved the first's.
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d late refetches pending after two events, want 1", n)
	}
	after := requests()
	// openAPILag after the first event, 1 s after the second: not yet.
	clk.Step(openAPILag - time.Second)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d late refetches pending %v after the first event, want the second's", n, openAPILag)
	}
	// openAPILag after the second: the late refetch, and nothing pending any more.
	clk.Step(time.Second)
	poll(t, 10*time.Second, "the late refetch", func() bool { return requests() > after })
	if n := clk.Waiters(); n != 0 {
		t.Errorf("%d late refetches pending after the last one ran", n)
	}
}
