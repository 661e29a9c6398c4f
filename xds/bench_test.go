package xds

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
)

// syntheticTopology has n upstreams in `sets` versions; version s serves the first 600-(sets-1-s)*5
// of 600 resources, so there are sets-1 capability sets besides the per-upstream clusters.
func syntheticTopology(n, sets int) *discovery.Topology {
	docs := make([]*discovery.Document, sets)
	for s := range sets {
		limit := 600 - (sets-1-s)*5
		var groups []apidiscoveryv2.APIGroupDiscovery
		for g := 0; g*20 < limit; g++ {
			var rs []apidiscoveryv2.APIResourceDiscovery
			for r := 0; r < 20 && g*20+r < limit; r++ {
				rs = append(rs, apidiscoveryv2.APIResourceDiscovery{Resource: fmt.Sprintf("r%d", r), Scope: "Namespaced",
					Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
			}
			groups = append(groups, apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: rs}}})
			groups[len(groups)-1].Name = fmt.Sprintf("g%d.example.com", g)
		}
		docs[s] = &discovery.Document{Groups: groups, Hash: fmt.Sprint("doc", s)}
	}
	core := &discovery.Document{Hash: "core"}
	facts := make([]discovery.UpstreamFacts, n)
	for i := range n {
		facts[i] = discovery.UpstreamFacts{
			Upstream: discovery.Upstream{Name: fmt.Sprintf("apiserver-%03d", i), Address: fmt.Sprintf("10.0.%d.%d:6443", i/250, i%250+1), Ready: true},
			API:      core, APIs: docs[i%sets],
		}
	}
	return discovery.Build("bench", time.Unix(0, 0), facts)
}

// BenchmarkTranslate100x10: 100 upstreams with 10 capability sets (target: under 20 ms).
func BenchmarkTranslate100x10(b *testing.B) {
	top := syntheticTopology(100, 10)
	o := testOptions()
	b.ReportAllocs()
	var rs *Resources
	for b.Loop() {
		var err error
		if rs, err = Translate(top, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rs.Clusters)), "clusters")
}

// BenchmarkPush measures a Topology change until a real ADS client holds the new clusters (target:
// under 100 ms).
func BenchmarkPush(b *testing.B) {
	tops := []*discovery.Topology{syntheticTopology(10, 3), syntheticTopology(11, 3)}
	src := newFakeSource(tops[0])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, Config{Options: testOptions(), Source: src, Grace: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ts := serve(b, ctx, s, lis)
	c := sotw.NewADSClient(ctx, testNode, resourcev3.ClusterType)
	if err := c.InitConnect(ts); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Fetch(); err != nil {
		b.Fatal(err)
	}
	c.Ack()
	i := 0
	for b.Loop() {
		i++
		src.Set(tops[i%2])
		if _, err := c.Fetch(); err != nil {
			b.Fatal(err)
		}
		c.Ack()
	}
}
