package xds

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryservice "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/grpcutil"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

type fakeSource struct {
	mu sync.Mutex
	t  *discovery.Topology
	ch chan struct{}
}

func newFakeSource(t *discovery.Topology) *fakeSource {
	return &fakeSource{t: t, ch: make(chan struct{})}
}

func (f *fakeSource) Watch() (*discovery.Topology, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t, f.ch
}

func (f *fakeSource) Set(t *discovery.Topology) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = t
	close(f.ch)
	f.ch = make(chan struct{})
}

type testServer struct {
	*Server
	reg  *prometheus.Registry
	conn *grpc.ClientConn
}

// startServer runs a Server on an open loopback listener and returns a client connection to it.
func startServer(t *testing.T, src TopologySource, grace time.Duration) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewPedanticRegistry()
	s, err := New(ctx, Config{Options: testOptions(), Source: src, Grace: grace, Logger: zaptest.NewLogger(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, ctx, s, lis)
	t.Cleanup(cancel)
	return &testServer{Server: s, reg: reg, conn: conn}
}

// serve runs s on lis until ctx ends and returns a client connection; cleanup waits for both.
func serve(t testing.TB, ctx context.Context, s *Server, lis net.Listener) *grpc.ClientConn {
	g := grpc.NewServer(grpcutil.ServerOptions(1000, 4<<20)...)
	s.Register(g)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); grpcutil.Serve(ctx, g, lis, time.Second) }()
	go func() { defer wg.Done(); s.Run(ctx) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); g.Stop(); wg.Wait() })
	return conn
}

func clusterNames(t *testing.T, rs []*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range rs {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

// testNode is an Envoy at the newest supported release, as Envoy fills in its node.
var testNode = envoyNode("envoy-1", 1, 40, 0)

func envoyNode(id string, major, minor, patch uint32) *corev3.Node {
	return &corev3.Node{Id: id, Cluster: "front", UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: major, MinorNumber: minor, Patch: patch},
		}}}
}

// connectADS is an ADS client of node on conn that asks for clusters.
func connectADS(t testing.TB, ctx context.Context, node *corev3.Node, conn grpc.ClientConnInterface) sotw.ADSClient {
	t.Helper()
	c := sotw.NewADSClient(ctx, node, resourcev3.ClusterType)
	if err := c.InitConnect(conn); err != nil {
		t.Fatal(err)
	}
	return c
}

// fetchClusters waits for the next CDS response on c and returns its cluster names.
func fetchClusters(t *testing.T, c sotw.ADSClient) []string {
	t.Helper()
	resp, err := c.Fetch()
	if err != nil {
		t.Fatal(err)
	}
	return clusterNames(t, resp.Resources)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestADSStateOfTheWorld(t *testing.T) {
	skewed := xdstest.Scenario(t, "testdata/skewed.in.yaml")
	src := newFakeSource(xdstest.Scenario(t, "testdata/two-same-version.in.yaml"))
	ts := startServer(t, src, time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := connectADS(t, ctx, testNode, ts.conn)
	first := fetchClusters(t, c)
	if !slices.Contains(first, wire.UpstreamCluster("cp-1")) || !slices.Contains(first, wire.AllCluster) {
		t.Fatalf("initial clusters %v", first)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the ACK", func() bool { return testutil.ToFloat64(ts.m.acks.WithLabelValues("cluster")) == 1 })

	initial := ts.Current()
	if initial == nil {
		t.Fatal("no Topology for ext_proc after the Envoy acknowledged the first snapshot")
	}

	// A Topology with a new capability set: ext_proc keeps deciding with the one the Envoy has
	// until it acknowledges the clusters of the new one.
	src.Set(skewed)
	got := fetchClusters(t, c)
	newCluster := wire.UpstreamCluster("new")
	if !slices.Contains(got, newCluster) {
		t.Fatalf("clusters after change %v lack %s", got, newCluster)
	}
	// Retained for the grace period: the departed upstreams' clusters are still there.
	if !slices.Contains(got, wire.UpstreamCluster("cp-1")) {
		t.Errorf("cp-1 removed before its grace period: %v", got)
	}
	for _, c := range []string{newCluster, wire.AnonCluster(newCluster), wire.HTTP1Cluster(newCluster)} {
		if !slices.Contains(got, c) {
			t.Fatalf("clusters after change %v lack %s", got, c)
		}
	}
	if cur := ts.Current(); cur != initial {
		t.Fatalf("ext_proc decides with %v before the Envoy acknowledged its clusters, want %s", cur, initial.Version)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "ext_proc deciding with the acknowledged Topology", func() bool { return ts.Current() == skewed })

	// A NACK: counted, and the server goes on serving; ext_proc keeps the Topology the Envoy has.
	src.Set(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"))
	fetchClusters(t, c)
	if err := c.Nack("cluster skewgate-upstream-c: simulated rejection"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the NACK", func() bool { return testutil.ToFloat64(ts.m.nacks.WithLabelValues("cluster")) == 1 })
	if cur := ts.Current(); cur != skewed {
		t.Errorf("after a NACK ext_proc decides with %v, want the acknowledged %s", cur, skewed.Version)
	}
	src.Set(skewed)
	if got := fetchClusters(t, c); !slices.Contains(got, newCluster) {
		t.Errorf("after a NACK the server stopped serving: %v", got)
	}
}

func TestADSDelta(t *testing.T) {
	src := newFakeSource(xdstest.Scenario(t, "testdata/skewed.in.yaml"))
	ts := startServer(t, src, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discoveryservice.NewAggregatedDiscoveryServiceClient(ts.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryservice.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range resp.Resources {
		names = append(names, r.Name)
	}
	want, _ := Translate(xdstest.Scenario(t, "testdata/skewed.in.yaml"), testOptions())
	if !slices.Equal(slices.Sorted(slices.Values(names)), want.ClusterNames()) {
		t.Fatalf("delta clusters %v, want %v", names, want.ClusterNames())
	}
	if err := stream.Send(&discoveryservice.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the delta ACK", func() bool { return testutil.ToFloat64(ts.m.acks.WithLabelValues("cluster")) == 1 })
	if testutil.ToFloat64(ts.m.streams.WithLabelValues(modeDelta)) != 1 {
		t.Errorf("delta streams gauge = %v", testutil.ToFloat64(ts.m.streams.WithLabelValues(modeDelta)))
	}

	// A change arrives as a delta: the new set's clusters added.
	src.Set(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"))
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, r := range resp.Resources {
		added = append(added, r.Name)
	}
	if !slices.Contains(added, wire.UpstreamCluster("c")) {
		t.Errorf("delta after change %v lacks %s", added, wire.UpstreamCluster("c"))
	}
}

// TestVersionsNeverRepeat: a restarted server (same Topology, fresh counter) must not reuse a version
// string: the snapshot cache does not answer a request whose version_info equals the snapshot's.
func TestVersionsNeverRepeat(t *testing.T) {
	top := xdstest.Scenario(t, "testdata/skewed.in.yaml")
	seen := map[string]bool{}
	for range 3 {
		ts := startServer(t, newFakeSource(top), time.Hour)
		c := connectADS(t, context.Background(), testNode, ts.conn)
		fetchClusters(t, c)
		// The snapshot reaches the client before Version records it: wait for the record.
		v, published := ts.Version()
		if v == "" {
			<-published
			v, _ = ts.Version()
		}
		if v == "" || seen[v] {
			t.Fatalf("version %q repeated or empty (seen %v)", v, seen)
		}
		seen[v] = true
	}
}

// TestGraceExpiry: a cluster that left the Topology disappears from the snapshot once its grace period
// is over.
func TestGraceExpiry(t *testing.T) {
	src := newFakeSource(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"))
	ts := startServer(t, src, 50*time.Millisecond)
	c := connectADS(t, context.Background(), testNode, ts.conn)
	fetchClusters(t, c)
	c.Ack()
	src.Set(xdstest.Scenario(t, "testdata/skewed.in.yaml"))
	gone := wire.UpstreamCluster("c")
	for i := 0; ; i++ {
		got := fetchClusters(t, c)
		c.Ack()
		if !slices.Contains(got, gone) {
			if slices.Contains(got, wire.AnonCluster(gone)) || slices.Contains(got, wire.HTTP1Cluster(gone)) {
				t.Fatalf("%s left but a twin stayed: %v", gone, got)
			}
			break
		}
		if i > 3 {
			t.Fatalf("%s never left: %v", gone, got)
		}
	}
	if n := testutil.ToFloat64(ts.m.retained); n != 0 {
		t.Errorf("retained clusters gauge = %v after expiry", n)
	}
}

// TestTranslationFailureKeepsLastSnapshot: a Topology that cannot be translated publishes nothing.
func TestTranslationFailureKeepsLastSnapshot(t *testing.T) {
	src := newFakeSource(xdstest.Scenario(t, "testdata/skewed.in.yaml"))
	ts := startServer(t, src, time.Hour)
	c := connectADS(t, context.Background(), testNode, ts.conn)
	fetchClusters(t, c)
	before, changed := ts.Version()
	if before == "" { // the first snapshot reached the client before Version recorded it
		<-changed
		before, changed = ts.Version()
	}
	bad := discovery.Build("bad", time.Unix(0, 0), []discovery.UpstreamFacts{{
		Upstream: discovery.Upstream{Name: "x", Address: "not-an-address", Ready: true},
		API:      xdstest.Doc(t, "testdata", "core"), APIs: xdstest.Doc(t, "testdata", "apis-v1.36"),
	}})
	src.Set(bad)
	waitUntil(t, "the failed publish", func() bool { return testutil.ToFloat64(ts.m.publishes.WithLabelValues(publishFailed)) == 1 })
	select {
	case <-changed:
		t.Fatal("a failed translation published a snapshot")
	default:
	}
	if v, _ := ts.Version(); v != before {
		t.Errorf("version moved from %s to %s", before, v)
	}
}

func TestOptionsValidate(t *testing.T) {
	// Each bad option is refused with an error naming what is wrong with it.
	for name, c := range map[string]struct {
		mut  func(*Options)
		want string
	}{
		"no serving cert":       {func(o *Options) { o.ServingCertFile = "" }, "serving certificate file is required"},
		"no upstream CA":        {func(o *Options) { o.UpstreamCAFile = "" }, "upstream CA file is required"},
		"no front-proxy key":    {func(o *Options) { o.FrontProxyKeyFile = "" }, "front-proxy client key file is required"},
		"plaintext off-host":    {func(o *Options) { o.ExtProcAddress = "10.1.2.3:18001" }, `ext_proc address "10.1.2.3:18001" is not loopback or a unix socket`},
		"relative unix socket":  {func(o *Options) { o.ExtProcAddress = "unix://run/x.sock" }, `"unix://run/x.sock": unix socket path must be absolute`},
		"half of mTLS":          {func(o *Options) { o.ExtProcCAFile = "/ca.crt" }, "mTLS needs all of the ext_proc CA, certificate and key files, or none"},
		"listen on a hostname":  {func(o *Options) { o.ListenAddress = "front.example" }, `listen address "front.example" is not an IP address`},
		"absurd ext_proc limit": {func(o *Options) { o.ExtProcTimeout = time.Minute }, "ext_proc timeout 1m0s out of range [1ms, 10s]"},
		"key apart from cert":   {func(o *Options) { o.FrontProxyKeyFile = "/etc/keys/front-proxy-client.key" }, `key "/etc/keys/front-proxy-client.key" must be in the same directory`},
		"relative CA path":      {func(o *Options) { o.UpstreamCAFile = "pki/ca.crt" }, `"pki/ca.crt" must be an absolute path`},
	} {
		o := testOptions()
		c.mut(&o)
		if _, err := Translate(emptyTopology(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Translate error %v, want one with %q", name, err, c.want)
		}
	}
	o := testOptions()
	o.ExtProcAddress = "10.1.2.3:18001"
	o.ExtProcCAFile, o.ExtProcCertFile, o.ExtProcKeyFile = "/ca.crt", "/tls.crt", "/tls.key"
	if _, err := Translate(emptyTopology(), o); err != nil {
		t.Errorf("mTLS to a remote ext_proc refused: %v", err)
	}
}
