package dataplane

import (
	"context"
	"fmt"
	"go/build"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestNodeIdentifiesEnvoy: the node on the ADS stream says user_agent_name "envoy" and the
// configured release as user_agent_build_version, on delta and SotW.
func TestNodeIdentifiesEnvoy(t *testing.T) {
	for _, p := range []Protocol{Delta, SotW} {
		t.Run(string(p), func(t *testing.T) {
			a := newUpstream(t, "a")
			x := startXDS(t)
			pki := newPKI(t)
			cert, key, _ := pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
			x.set(t, listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()), certSecret("front-cert", cert, key, ""))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dp, err := Start(ctx, Config{XDSAddress: x.addr, NodeID: testNode, Protocol: p, EnvoyVersion: "1.38.4", Seed: 1, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer dp.Close()
			x.mu.Lock()
			defer x.mu.Unlock()
			// go-control-plane's SotW server copies the first node into later requests before its
			// callback sees them, so only delta shows what the client sent.
			if p == Delta && len(x.nodes) != 1 {
				t.Errorf("node sent on %d requests, want on the first only (set_node_on_first_message_only)", len(x.nodes))
			}
			n := x.nodes[0]
			v := n.GetUserAgentBuildVersion().GetVersion()
			if n.Id != testNode || n.UserAgentName != "envoy" || v.GetMajorNumber() != 1 || v.GetMinorNumber() != 38 || v.GetPatch() != 4 {
				t.Errorf("node %v", n)
			}
		})
	}
	if _, err := Start(context.Background(), Config{EnvoyVersion: "1.40"}); err == nil {
		t.Error("a version without a patch level was accepted")
	}
}

// TestStartupLogNamesTheStandIn: the first log line says this is the test data plane standing in
// for Envoy, with the seed; a zero seed is replaced by a random, logged one.
func TestStartupLogNamesTheStandIn(t *testing.T) {
	a := newUpstream(t, "a")
	x := startXDS(t)
	pki := newPKI(t)
	cert, key, _ := pki.issueFiles(t, t.TempDir(), "front", []string{"front"}, false)
	x.set(t, listener(t, nil), routes(routeTo("default", "a")), plainCluster("a", a.addr()), certSecret("front-cert", cert, key, ""))
	var mu sync.Mutex
	var lines []string
	dp, err := Start(context.Background(), Config{XDSAddress: x.addr, NodeID: testNode, Logf: func(f string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(f, args...))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf("test data plane standing in for Envoy (seed %d)", dp.Seed())
	if dp.Seed() == 0 || len(lines) == 0 || !strings.Contains(lines[0], want) {
		t.Errorf("first log line %q, want it to contain %q", lines, want)
	}
	if !strings.Contains(dp.String(), "standing in for Envoy") {
		t.Errorf("String() = %q", dp.String())
	}
}

// TestNewClusterWarms: a cluster with health checks serves nothing until each host had its first
// check: before that the router does not find it (NC 503); a host whose first check failed is
// never used.
func TestNewClusterWarms(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	b.ready.Store(500)
	f := startFront(t, Delta, listener(t, nil), routes(routeTo("default", "c")), plainCluster("other", a.addr()))
	c := plainCluster("c", a.addr(), b.addr())
	c.HealthChecks = []*corev3.HealthCheck{{Timeout: durationpb.New(time.Second), Interval: durationpb.New(time.Hour),
		NoTrafficInterval: durationpb.New(time.Hour), UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/readyz"}}}}
	if code, _ := get(t, f.client(false), f.url("/")); code != 503 {
		t.Fatalf("no cluster c yet: %d, want 503 NC", code)
	}
	f.update(listener(t, nil), routes(routeTo("default", "c")), c)
	f.waitActive("c")
	for range 20 {
		if code, body := get(t, f.client(false), f.url("/")); code != 200 || body != "a" {
			t.Fatalf("%d %q, want every request on a (b failed its first check)", code, body)
		}
	}
	if b.count() != 0 {
		t.Errorf("b got %d requests", b.count())
	}
}

// TestNoProductImports: the stand-in shares no code with the system under test.
func TestNoProductImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/skewgate/skewgate/") {
			t.Errorf("the test data plane imports %s", imp)
		}
	}
}
