package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

// TestOpenAPIRangeFloodThroughTheFront: 16 clients without credentials ask the front for
// /openapi/v3 with thousands of byte ranges each, for 10 s, while two clients with the admin's client
// certificate and two with the admin's token read the skewed resource. ext_proc sets the identity headers from the certificate, so
// if the flood pushed it past Envoy's ext_proc timeout (Envoy then fails open) the certificate
// requests would reach the apiservers without identity (401) or take the default route (404 from the
// v1.35 apiserver). Every certificate and token request must get 200; every flood request the apiserver's own
// refusal, its 403 byte for byte or a stream it reset (the front never answers an anonymous
// /openapi/v3 by default).
func TestOpenAPIRangeFloodThroughTheFront(t *testing.T) {
	e := setup(t)
	admin := e.tb.PKI.Admin
	certClient := httpsClient(t, e.tb, &admin)
	anon := httpsClient(t, e.tb, nil)

	// As many distinct one-byte ranges as fit in 56 KiB and in the front's index: below the
	// index's size, so http.ServeContent would answer each with a part of its own.
	_, _, body := indexOf(t, anon, e.f.URL, testbed.AdminToken)
	var b strings.Builder
	b.WriteString("bytes=")
	n := 0
	for ; n < len(body)-1 && b.Len() < 56<<10; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d-%d", n, n)
	}
	rang := b.String()
	t.Logf("%d ranges (%d bytes) on a %d-byte index", n, len(rang), len(body))

	// What each apiserver itself answers such a request (without credentials): the flood must get
	// exactly that, the apiserver's own refusal, every time.
	refusals := map[string]bool{}
	for _, a := range e.tb.Apiservers() {
		code, body, err := do(t, anon, http.MethodGet, a.URL()+"/openapi/v3", "", "Range", rang)
		if err != nil || code != http.StatusForbidden {
			t.Fatalf("%s: GET /openapi/v3 without credentials, %d ranges: %d %v %.200s, want its 403 (the testbed is wrong)", a.Name, n, code, err, body)
		}
		refusals[body] = true
	}

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var floodN, floodServed, floodErr, floodReset, floodOther atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				code, body, err := do(t, anon, http.MethodGet, e.f.URL+"/openapi/v3", "", "Range", rang)
				switch {
				case err != nil && ctx.Err() != nil:
					continue // cut by the end of the flood, not an answer
				case err != nil:
					floodErr.Add(1)
				case code == http.StatusOK || code == http.StatusPartialContent:
					floodServed.Add(1)
				case code == http.StatusServiceUnavailable && strings.Contains(body, "remote") && strings.Contains(body, "reset"):
					// The apiserver reset the stream (Envoy: "reset reason: remote reset"; the
					// stand-in: "{remote_reset}"): a refusal too, and nothing disclosed.
					floodReset.Add(1)
				case code != http.StatusForbidden || !refusals[body]:
					if floodOther.Add(1) == 1 {
						t.Logf("flood: %d %.300s, not an apiserver's own refusal", code, body)
					}
				}
				floodN.Add(1)
			}
		}()
	}
	var mu sync.Mutex
	var certN int
	failures := map[string]int{}
	path := e.f.URL + "/apis/" + mapGroup + "/v1/" + mapResource
	for i := range 4 {
		client, token := certClient, ""
		if i%2 == 1 {
			client, token = anon, testbed.AdminToken
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond) // pacing the clients, not synchronisation
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				code, body, err := do(t, client, http.MethodGet, path, token)
				mu.Lock()
				certN++
				switch {
				case err != nil:
					failures["transport: "+err.Error()]++
				case code != http.StatusOK:
					failures[fmt.Sprintf("%d %.120s", code, body)]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, c := range failures {
		failed += c
	}
	t.Logf("flood: %d requests (%d transport errors, %d streams the apiserver reset); certificate and token requests: %d, %d failed: %v",
		floodN.Load(), floodErr.Load(), floodReset.Load(), certN, failed, failures)
	writeResults(t, e, map[string]any{
		"ranges_per_request":   n,
		"flood_clients":        16,
		"flood_requests":       floodN.Load(),
		"flood_served_index":   floodServed.Load(),
		"flood_transport_errs": floodErr.Load(),
		"flood_reset":          floodReset.Load(),
		"flood_not_refused":    floodOther.Load(),
		"client_requests":      certN,
		"client_failed":        failed,
		"client_failures":      failures,
	})
	if floodServed.Load() > 0 {
		t.Errorf("%d anonymous flood requests got the index", floodServed.Load())
	}
	if floodErr.Load()+floodOther.Load() > 0 {
		t.Errorf("of %d flood requests, %d got no answer and %d an answer other than the apiserver's own 403 or a stream it reset: want its refusal for every one",
			floodN.Load(), floodErr.Load(), floodOther.Load())
	}
	if certN == 0 {
		t.Fatal("no certificate request ran")
	}
	for f, c := range failures {
		t.Errorf("%d of %d certificate requests: %s", c, certN, f)
	}
}
