package discovery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// TestOpenAPIRefetchedAfterCRDChange: a CRD event refetches the index at once and again openAPILag
// later on Config.Clock (the apiserver publishes a CRD's OpenAPI about a second after the CRD
// changes); a burst of events moves the late refetch to openAPILag after the last one. The clock is
// the controller's one clock, a fake one the test steps (in 5 ms steps, so the work queue's rate
// limiter, on the same clock, runs too); probes and polls are an hour apart, so every index request
// below comes from an event or the late refetch.
func TestOpenAPIRefetchedAfterCRDChange(t *testing.T) {
	pki, cert := testPKI(t)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), capturedDocs(t, "v1.36.3", keyApps))
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c, err := New(Config{Upstream: restFor(t, pki), Static: []StaticUpstream{{Name: "a", Address: up.addr()}},
		Metadata: meta, ProbeInterval: time.Hour, PollInterval: time.Hour, Clock: clk,
		Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	stepUntil(t, clk, "the index", func() bool { return c.openapi.Index("a") != nil })
	crds := meta.Resource(crdGVR).(metadatafake.MetadataClient)
	crd := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	requests := func() int64 { return up.indexReqs.Load() }
	// stepFor moves the fake clock by d in 5 ms steps and reports the index requests meanwhile.
	stepFor := func(d time.Duration) int64 {
		before := requests()
		for end := clk.Now().Add(d); clk.Now().Before(end); {
			clk.Step(5 * time.Millisecond)
			time.Sleep(time.Millisecond) // lets the controller's goroutines run; time itself is the fake clock's
		}
		return requests() - before
	}
	// event creates a CRD and waits for the refetch it causes; it returns the clock's time at the
	// creation (the late refetch is due openAPILag after the handler ran, at that time or later).
	event := func(name string) time.Time {
		t.Helper()
		at, before := clk.Now(), requests()
		if _, err := crds.CreateFake(crd(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stepUntil(t, clk, "the refetch at the event", func() bool { return requests() > before })
		return at
	}
	start := clk.Now()
	event("crontabs.stable.example.com")
	stepFor(time.Second - clk.Since(start))
	second := event("widgets.stable.example.com")
	// Up to openAPILag after the second event (past openAPILag after the first): no late refetch,
	// the second event moved the first's.
	if n := stepFor(openAPILag - 20*time.Millisecond - clk.Since(second)); n != 0 {
		t.Fatalf("%d index requests between the events' refetches and openAPILag after the second event, want 0 (the first event's late refetch was not moved)", n)
	}
	// openAPILag after the second: the late refetch, once.
	after := requests()
	stepUntil(t, clk, "the late refetch", func() bool { return requests() > after })
	if late := clk.Since(second); late < openAPILag || late > openAPILag+time.Second {
		t.Errorf("late refetch %v after the last event, want %v (at most 1 s more: the event's handler ran then)", late, openAPILag)
	}
	if n := stepFor(3 * openAPILag); n != 0 {
		t.Errorf("%d more index requests after the late refetch, want 0", n)
	}
}
