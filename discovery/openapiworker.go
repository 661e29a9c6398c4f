package discovery

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/openapi"
)

// OpenAPI v3 in the workers: the Controller's openapi.Store holds every upstream's index and
// documents within Config.MaxOpenAPIBytes; each worker runs the Store's Fetch for its upstream on
// a goroutine of its own (runOpenAPI) after every discovery fetch but the first, and whenever a
// Build wants a document the upstream lacks, so a slow document never delays a readiness probe. An index failure
// never fails discovery: the last good index stays.

// openAPILag is how long after a CRD or APIService change the workers refetch once more. An
// apiserver publishes a CRD's OpenAPI asynchronously: apiextensions' openapiv3 controller rebuilds
// the group-version's document, then kube-aggregator's openapiv3 controller picks the new index up at
// its next local resync, 1 s later (successfulUpdateDelayLocal in kube-aggregator
// pkg/controllers/openapiv3/controller.go). The refetch at the event itself sees the new discovery,
// usually with the old OpenAPI.
const openAPILag = 2 * time.Second

// refetchAfterAPIChange answers a CRD or APIService event: every worker refetches now (discovery
// changes with the object) and again openAPILag after the last such event (the OpenAPI changes
// about a second later), on Config.Clock. Both coalesce in the queue.
func (c *Controller) refetchAfterAPIChange() {
	c.refetchAll()
	c.lateMu.Lock()
	defer c.lateMu.Unlock()
	if c.late != nil {
		c.late.Stop() // a later event moves the refetch to openAPILag after it
	}
	c.late = c.cfg.Clock.AfterFunc(openAPILag, func() { c.queue.Add(keyRefetchLate) })
}

// newOpenAPIStore is the Controller's Store: its budget, its clock, its metrics.
func newOpenAPIStore(cfg Config, m *metrics, changed func()) *openapi.Store {
	return openapi.NewStore(openapi.StoreConfig{
		MaxBytes: cfg.MaxOpenAPIBytes, MaxDocumentBytes: cfg.MaxDocumentBytes, RequestTimeout: cfg.RequestTimeout,
		Clock: cfg.Clock, Metrics: openAPIMetrics{m}, ErrorType: errorType, Changed: changed,
	})
}

// openAPIMetrics reports a Store's fetches in discovery's metrics.
type openAPIMetrics struct{ m *metrics }

func (o openAPIMetrics) Fetched(what, result string) {
	o.m.openapiFetches.WithLabelValues(what, result).Inc()
}
func (o openAPIMetrics) FetchFailed(typ string) { o.m.fetchErrors.WithLabelValues(typ).Inc() }
func (o openAPIMetrics) BudgetExceeded()        { o.m.openapiBudgetExceeded.Inc() }
func (o openAPIMetrics) HeldBytes(n int64)      { o.m.openapiHeldBytes.Set(float64(n)) }

// runOpenAPI fetches the upstream's OpenAPI each time it is kicked (coalesced), until ctx ends.
func (c *Controller) runOpenAPI(ctx context.Context, w *worker, log *zap.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.openapiKick:
			c.openapi.Fetch(ctx, w.name, w.f.getOpenAPI, log)
		}
	}
}

// applyOpenAPIWants hands the documents a new Topology wants to the Store (a document stays while
// its key needs a merge: wanted, merged or degraded; openapi.Store.Apply says why), and asks the
// workers of the upstreams that lack a wanted document to fetch it. It runs on the goroutine of Run
// after each Build.
func (c *Controller) applyOpenAPIWants(t *Topology) {
	keep := map[string]bool{}
	for _, keys := range t.OpenAPIWants() {
		for _, k := range keys {
			keep[k] = true
		}
	}
	for _, d := range t.OpenAPIDecisions() {
		if d.Action == ActionServe {
			keep[d.Key] = true
		}
	}
	for k := range t.OpenAPIDegraded() {
		keep[k] = true
	}
	dropped, lacking := c.openapi.Apply(t.OpenAPIWants(), func(key string) bool { return keep[key] })
	if dropped {
		c.requestSync()
	}
	for _, name := range lacking {
		if w := c.workers[name]; w != nil {
			w.fetchOpenAPI()
		}
	}
}
