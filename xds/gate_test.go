package xds

import (
	"context"
	"net"
	"testing"
	"time"

	discoveryservice "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/xdstest"
)

// Attacks on the ACK gate: a client that reaches the xDS endpoint must not switch ext_proc off or pin
// it to an old Topology. Each runs a real ADS client against the real server and checks that
// ext_proc's Topology (Current) follows the real Envoy.

// gateServer is a Server on a fake clock, with an Envoy that acknowledged the first Topology.
type gateServer struct {
	*testServer
	clk           *clocktesting.FakeClock
	src           *fakeSource
	first, second *discovery.Topology
	envoy         sotw.ADSClient
	ctx           context.Context
	logs          *observer.ObservedLogs
}

func startGateServer(t *testing.T) *gateServer {
	t.Helper()
	first, second := xdstest.Scenario(t, "testdata/two-same-version.in.yaml"), xdstest.Scenario(t, "testdata/skewed.in.yaml")
	src := newFakeSource(first)
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewPedanticRegistry()
	core, logs := observer.New(zap.InfoLevel)
	s, err := New(ctx, Config{Options: testOptions(), Source: src, Grace: time.Hour, Logger: zap.New(core), Registry: reg,
		Clock: clk, AckTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateServer{testServer: &testServer{Server: s, reg: reg, conn: serve(t, ctx, s, lis)}, clk: clk, src: src,
		first: first, second: second, ctx: ctx, logs: logs}
	t.Cleanup(cancel) // before serve's cleanup, which waits for Run
	waitUntil(t, "the first snapshot", func() bool { v, _ := s.Version(); return v != "" })
	g.envoy = connectADS(t, ctx, testNode, g.conn)
	fetchClusters(t, g.envoy)
	if err := g.envoy.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first Topology after the Envoy's ACK", func() bool { return s.Current() == first })
	return g
}

func (g *gateServer) openStreams() float64 {
	return testutil.ToFloat64(g.m.streams.WithLabelValues(modeSotW)) + testutil.ToFloat64(g.m.streams.WithLabelValues(modeDelta))
}

// moveOn publishes the second Topology and has the real Envoy acknowledge it.
func (g *gateServer) moveOn(t *testing.T) {
	t.Helper()
	g.src.Set(g.second)
	fetchClusters(t, g.envoy)
	if err := g.envoy.Ack(); err != nil {
		t.Fatal(err)
	}
}

func topologyName(g *gateServer, got *discovery.Topology) string {
	switch got {
	case nil:
		return "none"
	case g.first:
		return "first"
	case g.second:
		return "second"
	}
	return "another"
}

// TestSilentStreamDoesNotHoldTheGate: streams that open and send nothing (SotW and delta) count for
// nothing: ext_proc keeps deciding with what the real Envoy has, and follows it to the next Topology.
// (Before: an open stream counted at once, and Current was none for as long as it stayed open.)
func TestSilentStreamDoesNotHoldTheGate(t *testing.T) {
	g := startGateServer(t)
	ads := discoveryservice.NewAggregatedDiscoveryServiceClient(g.conn)
	if _, err := ads.StreamAggregatedResources(g.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ads.DeltaAggregatedResources(g.ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "three open streams", func() bool { return g.openStreams() == 3 })
	if got := g.Current(); got != g.first {
		t.Fatalf("with two silent streams open, ext_proc decides with %s, want first (what the Envoy has)", topologyName(g, got))
	}
	g.moveOn(t)
	waitUntil(t, "the second Topology after the Envoy's ACK", func() bool { return g.Current() == g.second })
	if n := testutil.ToFloat64(g.m.gatedStreams); n != 1 {
		t.Errorf("gated streams = %v, want 1 (the Envoy)", n)
	}
}

// TestUnsupportedNodeDoesNotHoldTheGate: a stream from a node the version gate refuses, too old or
// with no version, never counts: not before its first request, not while it is refused.
// (Before: it counted from the moment it opened until its refusal; Current was none meanwhile.)
func TestUnsupportedNodeDoesNotHoldTheGate(t *testing.T) {
	g := startGateServer(t)
	ads := discoveryservice.NewAggregatedDiscoveryServiceClient(g.conn)
	old, err := ads.StreamAggregatedResources(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := ads.DeltaAggregatedResources(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "three open streams", func() bool { return g.openStreams() == 3 })
	if got := g.Current(); got != g.first {
		t.Fatalf("with two unchecked streams open, ext_proc decides with %s, want first", topologyName(g, got))
	}
	if err := old.Send(&discoveryservice.DiscoveryRequest{Node: envoyNode("envoy-old", 1, 30, 0), TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	noVersion := envoyNode("envoy-unknown", 1, 40, 0)
	noVersion.UserAgentVersionType = nil
	if err := unknown.Send(&discoveryservice.DeltaDiscoveryRequest{Node: noVersion, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if resp, err := old.Recv(); resp != nil || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Envoy 1.30.0 got %v, %v; want FailedPrecondition", resp, err)
	}
	if resp, err := unknown.Recv(); resp != nil || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a node without a version got %v, %v; want FailedPrecondition", resp, err)
	}
	if got := g.Current(); got != g.first {
		t.Fatalf("after the refusals ext_proc decides with %s, want first", topologyName(g, got))
	}
	g.moveOn(t)
	waitUntil(t, "the second Topology after the Envoy's ACK", func() bool { return g.Current() == g.second })
	if n := testutil.ToFloat64(g.m.gatedStreams); n != 1 {
		t.Errorf("gated streams = %v, want 1 (the Envoy)", n)
	}
}

// TestQuietStreamStopsHoldingTheGate: a client that passes the version check, acknowledges one
// snapshot and goes quiet holds ext_proc at that Topology for the ACK timeout at most; one that
// sends its first request and never acknowledges anything holds ext_proc off as long. Each is logged
// and counted when its time is up, and counts again once it acknowledges the latest snapshot.
// (Before: the first pinned ext_proc to the old Topology, and the second kept it off, for as long as
// they stayed connected.)
func TestQuietStreamStopsHoldingTheGate(t *testing.T) {
	g := startGateServer(t)
	fake := connectADS(t, g.ctx, envoyNode("fake-envoy", 1, 40, 0), g.conn)
	fetchClusters(t, fake)
	if err := fake.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both streams gated", func() bool { return testutil.ToFloat64(g.m.gatedStreams) == 2 })

	g.moveOn(t)
	fetchClusters(t, fake) // received, never acknowledged
	waitUntil(t, "the Envoy's ACK of the second snapshot", func() bool { return testutil.ToFloat64(g.m.acks.WithLabelValues("cluster")) == 3 })
	if got := g.Current(); got != g.first {
		t.Fatalf("within the ACK timeout ext_proc decides with %s, want first: the quiet stream may still be applying the second", topologyName(g, got))
	}
	g.clk.Step(30*time.Second - time.Millisecond)
	if got := g.Current(); got != g.first {
		t.Fatalf("just before the ACK timeout ext_proc decides with %s, want first", topologyName(g, got))
	}
	g.clk.Step(time.Millisecond)
	waitUntil(t, "the second Topology once the quiet stream's time is up", func() bool { return g.Current() == g.second })
	if n := testutil.ToFloat64(g.m.ackTimeouts); n != 1 {
		t.Errorf("ACK timeouts = %v, want 1", n)
	}
	if n := testutil.ToFloat64(g.m.laggingStreams); n != 1 {
		t.Errorf("lagging streams = %v, want 1", n)
	}
	if n := g.logs.FilterMessageSnippet("has not acknowledged the latest snapshot in time").FilterField(zap.String("node", "fake-envoy")).Len(); n != 1 {
		t.Errorf("the lagging stream was logged %d times, want once", n)
	}

	// A silent stream past the version check: ext_proc names nothing (its Envoy may still serve a
	// previous process's config) until its time is up.
	silent, err := discoveryservice.NewAggregatedDiscoveryServiceClient(g.conn).StreamAggregatedResources(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := silent.Send(&discoveryservice.DiscoveryRequest{Node: envoyNode("silent-envoy", 1, 40, 0), TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "no Topology while the new stream has acknowledged nothing", func() bool { return g.Current() == nil })
	g.clk.Step(30 * time.Second)
	waitUntil(t, "the second Topology once the silent stream's time is up", func() bool { return g.Current() == g.second })
	if n := testutil.ToFloat64(g.m.ackTimeouts); n != 2 {
		t.Errorf("ACK timeouts = %v, want 2", n)
	}

	// The quiet one catches up: it counts again.
	if err := fake.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the caught-up stream gated again", func() bool {
		return testutil.ToFloat64(g.m.gatedStreams) == 2 && testutil.ToFloat64(g.m.laggingStreams) == 1
	})
	if got := g.Current(); got != g.second {
		t.Errorf("after both acknowledged the second snapshot ext_proc decides with %s", topologyName(g, got))
	}
}

// TestRefusingEnvoyKeepsItsTopology: the only Envoy NACKs a snapshot. It keeps serving with the one
// it acknowledged before, so ext_proc keeps deciding with that Topology, past the ACK timeout too
// (a NACK is an answer, not silence), and follows the Envoy once it accepts a later snapshot.
func TestRefusingEnvoyKeepsItsTopology(t *testing.T) {
	g := startGateServer(t)
	g.src.Set(g.second)
	fetchClusters(t, g.envoy)
	if err := g.envoy.Nack("refused for the test"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Envoy's NACK", func() bool { return testutil.ToFloat64(g.m.nacks.WithLabelValues("cluster")) == 1 })
	// Past the ACK timeout (the server's one clock also holds the grace period's timer, an hour away).
	g.clk.Step(31 * time.Second)
	if got := g.Current(); got != g.first {
		t.Fatalf("past the ACK timeout after a NACK ext_proc decides with %s, want first (what the Envoy serves with)", topologyName(g, got))
	}
	if n := testutil.ToFloat64(g.m.laggingStreams); n != 0 {
		t.Errorf("lagging streams = %v, want 0: the refusing Envoy answered", n)
	}
	if n := testutil.ToFloat64(g.m.gatedStreams); n != 1 {
		t.Errorf("gated streams = %v, want 1", n)
	}
}
