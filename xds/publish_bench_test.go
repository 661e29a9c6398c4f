package xds

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skewgate/skewgate/discovery"
)

// BenchmarkPublish1000: one publication of 1000 upstreams (3031 clusters), translation, content hash
// and snapshot, alternating between two Topologies so every one is published.
func BenchmarkPublish1000(b *testing.B) {
	benchPublish(b, []*discovery.Topology{syntheticTopology(1000, 10), syntheticTopology(1001, 10)}, publishOK)
}

// BenchmarkPublishUnchanged1000: the same Topology again, which translates and hashes and publishes
// nothing.
func BenchmarkPublishUnchanged1000(b *testing.B) {
	benchPublish(b, []*discovery.Topology{syntheticTopology(1000, 10)}, publishUnchanged)
}

func benchPublish(b *testing.B, tops []*discovery.Topology, result string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewPedanticRegistry()
	s, err := New(ctx, Config{Options: testOptions(), Source: newFakeSource(tops[0]), Grace: time.Nanosecond, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	s.publish(ctx, tops[0])
	before := testutil.ToFloat64(s.m.publishes.WithLabelValues(result))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		s.publish(ctx, tops[i%len(tops)])
	}
	if got := testutil.ToFloat64(s.m.publishes.WithLabelValues(result)) - before; got != float64(i) {
		b.Fatalf("%d publications, %v of them %s", i, got, result)
	}
}

// BenchmarkContentHash1000: the content hash of one translation of 1000 upstreams on its own.
func BenchmarkContentHash1000(b *testing.B) {
	rs, err := Translate(syntheticTopology(1000, 10), testOptions())
	if err != nil {
		b.Fatal(err)
	}
	resources := snapshotResources(rs)
	h := newMerkle() // as the server keeps one
	b.ReportAllocs()
	for b.Loop() {
		h.sum(resources)
	}
}

// BenchmarkContentHashMarshal1000: the reference contentHash is measured against, a SHA-256 of
// every resource's deterministic marshalling.
func BenchmarkContentHashMarshal1000(b *testing.B) {
	rs, err := Translate(syntheticTopology(1000, 10), testOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		marshalHash(b, rs)
	}
}
