package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryservice "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

func TestCheckNode(t *testing.T) {
	named := func(name string) *corev3.Node { n := envoyNode("n", 1, 40, 0); n.UserAgentName = name; return n }
	for _, c := range []struct {
		node *corev3.Node
		want string
	}{
		{envoyNode("n", 1, 36, 11), refusedTooOld}, // a minor upstream no longer supports
		{envoyNode("n", 1, 37, 0), refusedTooOld},  // CVE-2026-73548
		{envoyNode("n", 1, 37, 5), refusedTooOld},
		{envoyNode("n", 1, 37, 6), ""},
		{envoyNode("n", 1, 37, 7), ""},
		{envoyNode("n", 1, 38, 3), refusedTooOld},
		{envoyNode("n", 1, 38, 4), ""},
		{envoyNode("n", 1, 39, 0), refusedTooOld},
		{envoyNode("n", 1, 39, 1), ""},
		{envoyNode("n", 1, 40, 0), ""},
		{envoyNode("n", 1, 41, 0), ""}, // newer than the table: cut after the fix
		{envoyNode("n", 2, 0, 0), refusedUnknownVersion},
		{envoyNode("n", 0, 40, 0), refusedUnknownVersion},
		{&corev3.Node{Id: "n", UserAgentName: "envoy"}, refusedUnknownVersion},
		{&corev3.Node{Id: "n", UserAgentName: "envoy", UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.40.0"}}, refusedUnknownVersion},
		{named("grpc-go"), refusedNotEnvoy},
		{named(""), refusedNotEnvoy},
		{nil, refusedNotEnvoy},
	} {
		got, msg := checkNode(c.node)
		if got != c.want {
			t.Errorf("%v: reason %q (%s), want %q", c.node, got, msg, c.want)
		}
		if got != "" && msg == "" {
			t.Errorf("%v: refused without a message", c.node)
		}
	}
}

// TestADSRefusesUnsupportedEnvoy: over SotW and delta, a node below the floor gets its stream ended
// with FailedPrecondition and no resource; each refusal is counted, the log line is written once
// per node and version; a supported node on the same server gets its resources.
func TestADSRefusesUnsupportedEnvoy(t *testing.T) {
	ts := startServer(t, newFakeSource(xdstest.Scenario(t, "testdata/skewed.in.yaml")), time.Hour)
	core, logs := observer.New(zap.ErrorLevel)
	ts.gate.mu.Lock() // admit logs under mu
	ts.gate.log = zap.New(core)
	ts.gate.mu.Unlock()
	old := envoyNode("envoy-old", 1, 38, 3)

	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c := connectADS(t, ctx, old, ts.conn)
		resp, err := c.Fetch()
		cancel()
		if resp != nil || status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("SotW: an Envoy 1.38.3 got %v, %v; want the stream refused with FailedPrecondition", resp, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryservice.DeltaDiscoveryRequest{Node: envoyNode("envoy-delta", 1, 35, 0), TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); resp != nil || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delta: an Envoy 1.35.0 got %v, %v; want the stream refused with FailedPrecondition", resp, err)
	}

	if n := testutil.ToFloat64(ts.m.refused.WithLabelValues(refusedTooOld)); n != 3 {
		t.Errorf("refused streams (too_old) = %v, want 3", n)
	}
	if n := logs.FilterField(zap.String("node", "envoy-old")).Len(); n != 1 {
		t.Errorf("the refusal of envoy-old was logged %d times, want once", n)
	}
	if n := logs.FilterField(zap.String("node", "envoy-delta")).Len(); n != 1 {
		t.Errorf("the refusal of envoy-delta was logged %d times, want once", n)
	}
	if n := testutil.ToFloat64(ts.m.pushes.WithLabelValues("cluster")); n != 0 {
		t.Errorf("%v cluster responses were sent to refused nodes", n)
	}

	// The floor itself is accepted, over both protocols.
	c := connectADS(t, ctx, envoyNode("envoy-floor", 1, 37, 6), ts.conn)
	if got := fetchClusters(t, c); !slices.Contains(got, wire.AllCluster) {
		t.Errorf("SotW: Envoy 1.37.6 got clusters %v", got)
	}
	d, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(&discoveryservice.DeltaDiscoveryRequest{Node: envoyNode("envoy-floor-delta", 1, 39, 1), TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if resp, err := d.Recv(); err != nil || len(resp.Resources) == 0 {
		t.Errorf("delta: Envoy 1.39.1 got %v, %v", resp, err)
	}
}

// TestNoSnapshotBeforeFirstTopology: an Envoy that connects before discovery has a Topology gets no
// response (it keeps its last configuration); the first Topology then reaches it.
func TestNoSnapshotBeforeFirstTopology(t *testing.T) {
	src := newFakeSource(nil)
	ts := startServer(t, src, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c := connectADS(t, ctx, testNode, ts.conn)
	got := make(chan []string, 1)
	go func() {
		resp, err := c.Fetch()
		if err != nil {
			got <- nil
			return
		}
		var names []string
		for _, a := range resp.Resources {
			var cl clusterv3.Cluster
			if a.UnmarshalTo(&cl) == nil {
				names = append(names, cl.Name)
			}
		}
		got <- names
	}()
	d, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(&discoveryservice.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	gotDelta := make(chan int, 1)
	go func() {
		resp, err := d.Recv()
		if err != nil {
			gotDelta <- -1
			return
		}
		gotDelta <- len(resp.Resources)
	}()

	// Both streams are open and waiting (the server counted them) and nothing arrives.
	waitUntil(t, "both streams", func() bool {
		return testutil.ToFloat64(ts.m.streams.WithLabelValues(modeSotW)) == 1 && testutil.ToFloat64(ts.m.streams.WithLabelValues(modeDelta)) == 1
	})
	select {
	case g := <-got:
		t.Fatalf("SotW: a response before the first Topology: %v", g)
	case n := <-gotDelta:
		t.Fatalf("delta: a response before the first Topology (%d resources)", n)
	case <-time.After(500 * time.Millisecond):
	}
	if v, _ := ts.Version(); v != "" {
		t.Fatalf("snapshot %s published before the first Topology", v)
	}

	src.Set(xdstest.Scenario(t, "testdata/two-same-version.in.yaml"))
	select {
	case g := <-got:
		if !slices.Contains(g, wire.UpstreamCluster("cp-1")) {
			t.Errorf("SotW: first response %v lacks the Topology's clusters", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SotW: no response after the first Topology")
	}
	select {
	case n := <-gotDelta:
		if n <= 0 {
			t.Errorf("delta: first response has %d clusters", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("delta: no response after the first Topology")
	}
}

// TestCurrentIsWhatEveryEnvoyHas: ext_proc decides with the Topology whose snapshot every connected
// Envoy has acknowledged: none with no Envoy or before its first ACK (a restarted skewgate: Envoy
// still serves the previous process's config), the older one until the newer is acknowledged, and
// none again while another Envoy has acknowledged nothing.
func TestCurrentIsWhatEveryEnvoyHas(t *testing.T) {
	first, second := xdstest.Scenario(t, "testdata/two-same-version.in.yaml"), xdstest.Scenario(t, "testdata/skewed.in.yaml")
	src := newFakeSource(first)
	ts := startServer(t, src, time.Hour)
	waitUntil(t, "the first snapshot", func() bool { v, _ := ts.Version(); return v != "" })
	if c := ts.Current(); c != nil {
		t.Fatalf("Current with no Envoy connected: %s", c.Version)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := connectADS(t, ctx, testNode, ts.conn)
	fetchClusters(t, c)
	if got := ts.Current(); got != nil {
		t.Fatalf("Current before the Envoy acknowledged anything: %s", got.Version)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first Topology after the ACK", func() bool { return ts.Current() == first })

	src.Set(second)
	fetchClusters(t, c)
	if got := ts.Current(); got != first {
		t.Fatalf("Current moved to %v before the Envoy acknowledged the new snapshot", got)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second Topology after its ACK", func() bool { return ts.Current() == second })

	// A second Envoy that has acknowledged nothing holds ext_proc back to the route table.
	c2 := connectADS(t, ctx, &corev3.Node{Id: "front-2", UserAgentName: testNode.UserAgentName,
		UserAgentVersionType: testNode.UserAgentVersionType}, ts.conn)
	waitUntil(t, "nothing while the second Envoy has acknowledged nothing", func() bool { return ts.Current() == nil })
	fetchClusters(t, c2)
	if err := c2.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Topology both have", func() bool { return ts.Current() == second })
}
