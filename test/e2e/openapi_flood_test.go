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
// refusal (the front never answers an anonymous /openapi/v3 by default).
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

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var floodN, floodServed, floodErr atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				code, _, err := do(t, anon, http.MethodGet, e.f.URL+"/openapi/v3", "", "Range", rang)
				switch {
				case err != nil:
					floodErr.Add(1)
				case code == http.StatusOK || code == http.StatusPartialContent:
					floodServed.Add(1)
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
	t.Logf("flood: %d requests (%d transport errors); certificate and token requests: %d, %d failed: %v",
		floodN.Load(), floodErr.Load(), certN, failed, failures)
	writeResults(t, e, map[string]any{
		"ranges_per_request":   n,
		"flood_clients":        16,
		"flood_requests":       floodN.Load(),
		"flood_served_index":   floodServed.Load(),
		"flood_transport_errs": floodErr.Load(),
		"client_requests":      certN,
		"client_failed":        failed,
		"client_failures":      failures,
	})
	if floodServed.Load() > 0 {
		t.Errorf("%d anonymous flood requests got the index", floodServed.Load())
	}
	if certN == 0 {
		t.Fatal("no certificate request ran")
	}
	for f, c := range failures {
		t.Errorf("%d of %d certificate requests: %s", c, certN, f)
	}
}
