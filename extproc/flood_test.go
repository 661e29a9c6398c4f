package extproc

import (
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// A flood of one kind of request must not starve the others: many clients asking for the front's
// OpenAPI index with thousands of byte ranges each, over the real gRPC server, beside clients whose
// requests are plain routing decisions, for a certificate user (identity headers the Lua filter set)
// or a token. Every routing decision must come back within Envoy's ext_proc message timeout
// (skewgate's default, 500 ms; past it Envoy fails open to its own route table) with the right
// cluster, and leave the identity headers alone.

const (
	extProcTimeout = 500 * time.Millisecond // xds.Options' default ExtProcTimeout
	floodClients   = 16
	floodFor       = 3 * time.Second
	routingClients = 4
	routingEvery   = 5 * time.Millisecond // per routing client
)

// manyRanges is a Range header of n one-byte ranges, all the first byte: 15 000 fit in Envoy's
// default request header limit (60 KiB, DEFAULT_MAX_REQUEST_HEADERS_KB in envoy/http/codec.h).
// http.ServeContent answers them with a multipart body of n parts as long as they add up to no more
// than the document, so the index they ask for is made larger than that (floodFacts).
func manyRanges(n int) string {
	return "bytes=" + strings.Repeat("0-0,", n-1) + "0-0"
}

// floodFacts are openAPIFacts with 150 more keys whose documents differ between the upstreams, so
// the front's index is about 40 KB, as for a cluster with a few dozen CRD group-versions.
func floodFacts() []discovery.UpstreamFacts {
	facts := openAPIFacts()
	for i := range facts {
		for k := range 150 {
			key := fmt.Sprintf("apis/crd%d.example.com/v1", k)
			facts[i].OpenAPI.Keys[key] = fmt.Sprintf("%X", sha512.Sum512([]byte(facts[i].Name+key)))
		}
	}
	return facts
}

func TestOpenAPIRangeFloodLeavesRoutingAlone(t *testing.T) {
	rang := manyRanges(15000)
	if len(rang) > 60<<10 {
		t.Fatalf("Range header of %d bytes: past Envoy's limit", len(rang))
	}
	for _, c := range []struct {
		name     string
		md       []string // the flood's stream metadata
		extra    []string // the flood's other request headers
		upstream string   // the apiserver's status for the flood's requests
	}{
		// The apiservers refuse /openapi to anonymous requests by default (no system:discovery).
		{"anonymous, refused", []string{wire.CredentialsMetadata, wire.CredentialsNone}, nil, "401"},
		// Any valid token may read /openapi/v3.
		{"token, authorized", nil, []string{"authorization", "Bearer flood"}, "200"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startServer(t)
			top := discovery.Build("flood-1", time.Now(), floodFacts())
			if idx := top.OpenAPIIndex(); idx == nil || len(idx.JSON) < 15000 {
				t.Fatalf("the front's index is not larger than the ranges: %v", idx)
			}
			h.src.t.Store(top)
			req := envoyHeaders("GET", "/openapi/v3", append([]string{"range", rang}, c.extra...)...)
			ctx, stop := context.WithTimeout(context.Background(), floodFor)
			defer stop()

			var flooded, floodBusy, floodBad atomic.Int64
			var floodErr atomic.Value
			var wg sync.WaitGroup
			for range floodClients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						err := floodOnce(h.client, req, c.md, c.upstream)
						if errors.Is(err, errBusy) {
							floodBusy.Add(1)
							continue
						}
						if err != nil {
							if ctx.Err() == nil {
								floodBad.Add(1)
								floodErr.Store(err)
							}
							continue
						}
						flooded.Add(1)
					}
				}()
			}

			var mu sync.Mutex
			var lat []time.Duration
			var failures []string
			for i := range routingClients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(routingEvery) // pacing the clients, not synchronisation
					defer tick.Stop()
					for n := 0; ; n++ {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						cert := (i+n)%2 == 0
						d, err := routeOnce(h.client, cert)
						mu.Lock()
						lat = append(lat, d)
						if err != nil {
							failures = append(failures, err.Error())
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()

			slices.Sort(lat)
			if len(lat) == 0 {
				t.Fatal("no routing decision was asked for")
			}
			q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
			t.Logf("flood: %d streams answered in %v by %d clients (%.0f/s), %d busy (503), %d bad; routing: %d decisions, p50 %v, p99 %v, max %v, %d failed",
				flooded.Load(), floodFor, floodClients, float64(flooded.Load())/floodFor.Seconds(), floodBusy.Load(), floodBad.Load(),
				len(lat), q(0.5), q(0.99), lat[len(lat)-1], len(failures))
			if n := floodBad.Load(); n > 0 {
				t.Errorf("%d flood streams failed, the last: %v", n, floodErr.Load())
			}
			if flooded.Load() == 0 {
				t.Errorf("the flood never got an answer")
			}
			if len(failures) > 0 {
				t.Errorf("%d of %d routing decisions failed; first: %s", len(failures), len(lat), failures[0])
			}
		})
	}
}

var errBusy = errors.New("busy")

// floodOnce is one OpenAPI index request as Envoy runs it: the request headers, and the upstream's
// status if the answer asks for the response headers. A refused request must pass the apiserver's
// answer; an authorized one gets the front's index whole (the ranges ignored).
func floodOnce(client extprocv3.ExternalProcessorClient, req *extprocv3.ProcessingRequest, md []string, upstream string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := client.Process(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(req); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	last := first
	if first.GetModeOverride().GetResponseHeaderMode() == extprocfilterv3.ProcessingMode_SEND {
		if err := stream.Send(upstreamStatus(upstream)); err != nil {
			return err
		}
		if last, err = stream.Recv(); err != nil {
			return err
		}
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after the half-close: %v", err)
	}
	ir := last.GetImmediateResponse()
	switch {
	case upstream == "200" && ir.GetStatus().GetCode() == 503 && header(ir, "retry-after") != "":
		return errBusy // no serving slot came free in time: the answer the slots promise
	case upstream == "200" && (ir == nil || ir.GetStatus().GetCode() != 200):
		return fmt.Errorf("authorized: want the front's whole index, got %v", last.GetImmediateResponse().GetStatus())
	case upstream != "200" && ir != nil:
		return fmt.Errorf("refused: want the apiserver's answer, got the front's %v", ir.GetStatus())
	}
	return nil
}

// routeOnce is one routing decision for a skewed resource, for a certificate user (alice, group dev,
// as the Lua filter set them) or a token user (no identity header). It returns the time from opening
// the stream to the answer, what Envoy waits for.
func routeOnce(client extprocv3.ExternalProcessorClient, cert bool) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	extra := []string{"authorization", "Bearer routing"}
	if cert {
		extra = []string{wire.RemoteUserHeader, "alice", wire.RemoteGroupHeader, "dev"}
	}
	stream, err := client.Process(ctx)
	if err != nil {
		return time.Since(start), err
	}
	if err := stream.Send(envoyHeaders("GET", "/apis/admissionregistration.k8s.io/v1/"+mapResourceName, extra...)); err != nil {
		return time.Since(start), err
	}
	resp, err := stream.Recv()
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	stream.CloseSend()
	if d > extProcTimeout {
		return d, fmt.Errorf("answered after %v, past Envoy's %v", d, extProcTimeout)
	}
	m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if m == nil {
		return d, errors.New("no header mutation")
	}
	got := map[string][]string{}
	for _, o := range m.GetSetHeaders() {
		got[o.Header.Key] = append(got[o.Header.Key], string(o.Header.RawValue))
	}
	if c := got[wire.RouteHeader]; len(c) != 1 || c[0] != wire.UpstreamCluster("new") {
		return d, fmt.Errorf("cluster %v, want %s", c, wire.UpstreamCluster("new"))
	}
	if len(got) != 1 || len(m.GetRemoveHeaders()) != 0 {
		return d, fmt.Errorf("cert %v: mutation %v, want only the routing header", cert, m)
	}
	return d, nil
}
