package discovery

import (
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// TestOpenAPIRefetchedAfterCRDChange: a CRD event refetches the index at once and again about 2 s
// later (the apiserver publishes a CRD's OpenAPI about a second after the CRD changes); a burst of
// events moves the late refetch to 2 s after the last one.
func TestOpenAPIRefetchedAfterCRDChange(t *testing.T) {
	pki, cert := testPKI(t)
	up := newOpenAPIUpstream(t, cert, "v1.36.3", apisDoc(true), capturedDocs(t, "v1.36.3", keyApps))
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	// Polls far apart: every index request below comes from an event.
	c := openAPIController(t, pki, map[string]string{"a": up.addr()}, func(cfg *Config) {
		cfg.Metadata = meta
		cfg.PollInterval = time.Hour
	})
	poll(t, 10*time.Second, "the index", func() bool { return c.openapi.Index("a") != nil })
	time.Sleep(2500 * time.Millisecond) // past any late refetch of the informers' start
	// requests records when the index was requested from now on.
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	base := up.indexReqs.Load()
	go func() {
		seen := base
		for time.Since(start) < 6*time.Second {
			if n := up.indexReqs.Load(); n > seen {
				mu.Lock()
				for ; seen < n; seen++ {
					at = append(at, time.Since(start))
				}
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	crds := meta.Resource(crdGVR).(metadatafake.MetadataClient)
	crd := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	if _, err := crds.CreateFake(crd("crontabs.stable.example.com"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	second := time.Since(start) // the real time of the second event: a loaded machine oversleeps
	if _, err := crds.CreateFake(crd("widgets.stable.example.com"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("index requests after the events at 0 s and %v: %v", second, at)
	// At once for each event, then 2 s after the last one, not 2 s after the first. The windows
	// leave 0.9 s for an event to reach the controller on a loaded machine and start at the events'
	// real times.
	var early, late, between int
	for _, d := range at {
		switch {
		case d < 900*time.Millisecond || (d >= second && d < second+900*time.Millisecond):
			early++
		case d >= second+1900*time.Millisecond && d < second+3500*time.Millisecond:
			late++
		default:
			between++
		}
	}
	if early < 2 || late != 1 || between != 0 {
		t.Errorf("index requests at %v: want one right after each event and one 2 s after the last", at)
	}
}
