package flow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/openapi"
)

// startController runs c until the test ends.
func startController(t *testing.T, c *discovery.Controller) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// openAPIGetter is an openapi.Getter for the apiserver at addr as discovery talks to it: base's
// credentials, the certificate verified for discovery.ServerName, redirects not followed (a 301 for
// a document means its index moved), JSON asked for.
func openAPIGetter(t *testing.T, base *rest.Config, addr string) openapi.Getter {
	t.Helper()
	cfg := rest.CopyConfig(base)
	cfg.Host = "https://" + addr
	cfg.TLSClientConfig.ServerName = discovery.ServerName
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		return client.Do(req)
	}
}

// storeMetrics counts what an openapi.Store reports.
type storeMetrics struct {
	mu      sync.Mutex
	fetched map[string]int // "<what>/<result>"
	failed  map[string]int // error type
}

func newStoreMetrics() *storeMetrics {
	return &storeMetrics{fetched: map[string]int{}, failed: map[string]int{}}
}

func (m *storeMetrics) Fetched(what, result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetched[what+"/"+result]++
}

func (m *storeMetrics) FetchFailed(typ string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed[typ]++
}

func (m *storeMetrics) BudgetExceeded() { m.FetchFailed("budget_exceeded") }
func (m *storeMetrics) HeldBytes(int64) {}

func (m *storeMetrics) counts() (fetched, failed map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fetched, failed = map[string]int{}, map[string]int{}
	for k, v := range m.fetched {
		fetched[k] = v
	}
	for k, v := range m.failed {
		failed[k] = v
	}
	return fetched, failed
}

// errorType names a failed fetch's error as discovery's metrics do.
func errorType(err error) string {
	var oe *openapi.Error
	if errors.As(err, &oe) {
		return oe.Type
	}
	return discovery.ErrConnect
}

// counter is the value of the counter name with the label pairs in reg (0 when it has none).
func counter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// fetchedFromBoth says why the controller of reg has not fetched the OpenAPI index of both its
// ready upstreams, "" when it has. A worker fetches its upstream's index right after discovery and
// before the first probe, so with both upstreams ready and capable, no failed fetch of any kind and
// no index answered 404, both were fetched, each with an index ("ok").
func fetchedFromBoth(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	if n := counter(t, reg, "skewgate_discovery_fetch_errors_total", nil); n != 0 {
		return fmt.Sprintf("%v failed fetches", n)
	}
	if n := counter(t, reg, "skewgate_discovery_openapi_fetches_total", map[string]string{"what": openapi.WhatIndex, "result": openapi.ResultNotFound}); n != 0 {
		return fmt.Sprintf("%v indexes not found", n)
	}
	if n := counter(t, reg, "skewgate_discovery_openapi_fetches_total", map[string]string{"what": openapi.WhatIndex, "result": openapi.ResultOK}); n < 2 {
		return fmt.Sprintf("%v indexes fetched", n)
	}
	return ""
}
