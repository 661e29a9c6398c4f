package extproc

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/openapitest"
	"github.com/skewgate/skewgate/openapi"
)

// Protobuf renderings of the front's OpenAPI documents are made once at a time per document, and the
// background rendering starts once per Topology version.

// TestOpenAPIAnswersOncePerTopologyVersion: requests racing on a new Topology version all get the
// one frontOpenAPI stored, so only that one starts the background rendering.
func TestOpenAPIAnswersOncePerTopologyVersion(t *testing.T) {
	s := NewServer(&fixedSource{}, nil, prometheus.NewRegistry())
	facts := servedFacts(t)
	for _, version := range []string{"served-1", "served-2"} {
		top := discovery.Build(version, time.Now(), facts)
		const n = 16
		got := make(chan *frontOpenAPI, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				got <- s.openAPIFor(top)
			}()
		}
		close(start)
		stored := map[*frontOpenAPI]bool{}
		for range n {
			stored[<-got] = true
		}
		if cur := s.frontOpenAPI.load(); len(stored) != 1 || !stored[cur] || cur.t.Version != version {
			t.Errorf("%s: %d racing requests got %d different answers, want the one stored", version, n, len(stored))
		}
	}
}

// TestPerTopologyRacingBuildsShareOne: the builds of racing requests are all answered with the one
// value stored, even if each of them built its own.
func TestPerTopologyRacingBuildsShareOne(t *testing.T) {
	var m perTopology[*int]
	top := discovery.Build("v1", time.Now(), nil)
	const n = 32
	got := make(chan *int, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			got <- m.get(top, func(*discovery.Topology) *int { return &i })
		}()
	}
	close(start)
	for range n {
		if v := <-got; v != m.load() {
			t.Fatalf("a racing request got %d, the stored value is %d", *v, *m.load())
		}
	}
}

// TestOpenAPINewVersionJoinsRenderingInFlight: a Topology version that serves a document whose
// rendering the previous version has in flight waits for that rendering instead of making another.
func TestOpenAPINewVersionJoinsRenderingInFlight(t *testing.T) {
	s := NewServer(&fixedSource{}, nil, prometheus.NewRegistry())
	h := openapitest.NewHeldRender("rendered-by-the-previous-version")
	waiting := make(chan struct{}, 16)
	s.openAPIConfig = openapi.FrontConfig{Render: h.Render, OnRenderWait: func(string) { waiting <- struct{}{} }}
	facts := servedFacts(t)
	prev := s.frontOpenAPI.get(discovery.Build("served-1", time.Now(), facts), func(top *discovery.Topology) *frontOpenAPI {
		return newFrontOpenAPI(top, nil, s.openAPIConfig) // stored without openAPIFor: no background rendering
	})
	spec := prev.Merged(keyAdmission)
	if spec == nil {
		t.Fatal("not merged")
	}
	go prev.Protobuf(spec)
	<-waiting
	next := s.openAPIFor(discovery.Build("served-2", time.Now(), facts))
	if next == prev || next.Merged(keyAdmission).Hash != spec.Hash {
		t.Fatal("the next version does not serve the same document")
	}
	body := make(chan []byte)
	go func() {
		body <- next.document(keyAdmission, next.Merged(keyAdmission), &openAPIRequest{accept: acceptProto}).GetImmediateResponse().GetBody()
	}()
	<-waiting // the request or the background rendering: both wait for it
	h.Release()
	if b := <-body; string(b) != "rendered-by-the-previous-version" || h.Calls() != 1 {
		t.Errorf("the next version answered %q after %d renderings, want the previous version's one", b, h.Calls())
	}
}
