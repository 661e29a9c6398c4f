package xds

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/test/synthetic"
)

func syntheticTopology(n, sets int) *discovery.Topology { return synthetic.Topology(n, 600, sets) }

// BenchmarkTranslate100x10: 100 upstreams with 10 capability sets (target: under 20 ms).
func BenchmarkTranslate100x10(b *testing.B) { benchTranslate(b, syntheticTopology(100, 10)) }

// BenchmarkTranslate1000: 1000 upstreams in 10 versions (9 capability sets), every cluster with its
// twins, and the skew routes of the resources the versions differ in.
func BenchmarkTranslate1000(b *testing.B) { benchTranslate(b, syntheticTopology(1000, 10)) }

func benchTranslate(b *testing.B, top *discovery.Topology) {
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
	b.ReportMetric(float64(len(rs.Routes[0].VirtualHosts[0].Routes)), "routes")
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
	c := connectADS(b, ctx, testNode, ts)
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
