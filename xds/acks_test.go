package xds

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
)

// TestNackDetailsAreBounded: an Envoy that NACKs every push with a new 16 KiB detail leaves nothing
// behind but the latest NACK per type; the same NACK repeated is logged once.
func TestNackDetailsAreBounded(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	m := newMetrics(prometheus.NewRegistry())
	a := newAcks(zap.NewNop(), m, clock.RealClock{}, time.Hour) // the observer keeps every line: first measure without it
	a.open(sotw1)
	node := &corev3.Node{Id: "envoy-" + strings.Repeat("x", 10000)}
	nack := func(i int, detail string) {
		nonce := strconv.Itoa(i)
		a.sent(sotw1, resourcev3.ClusterType, "v1", nonce)
		a.received(sotw1, node, nonce, &detail)
	}

	const n = 2000
	big := strings.Repeat("y", 16<<10)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		nack(i, strconv.Itoa(i)+big) // 32 MiB of distinct details in all
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 4<<20 {
		t.Errorf("%d NACKs with distinct 16 KiB details grew the heap by %d MiB", n, grown>>20)
	}
	a.mu.Lock()
	if got := len(a.streams[sotw1].nacked); got != 1 {
		t.Errorf("%d NACK entries remembered for one type, want 1", got)
	}
	if got := len(a.streams[sotw1].node); got > maxNodeID {
		t.Errorf("node id of %d bytes kept", got)
	}
	a.mu.Unlock()

	a.log = zap.New(core)
	nack(n, big)
	if d := logs.TakeAll()[0].ContextMap()["detail"].(string); len(d) > maxNackDetail+len("...(truncated)") {
		t.Fatalf("logged a %d byte detail", len(d))
	}
	if got := testutil.ToFloat64(m.nacks.WithLabelValues("cluster")); got != n+1 {
		t.Errorf("nacks metric = %v, want %d", got, n+1)
	}
	// The same NACK again and again: one line. After an ACK, a NACK is news again.
	for i := range 100 {
		nack(n+i, "same")
	}
	if got := logs.Len(); got != 1 {
		t.Errorf("the same NACK repeated 100 times logged %d lines, want 1", got)
	}
	a.sent(sotw1, resourcev3.ClusterType, "v2", "ack")
	a.received(sotw1, node, "ack", nil)
	nack(n+200, "same")
	if got := logs.Len(); got != 2 {
		t.Errorf("a NACK after an ACK: %d lines in all, want 2", got)
	}
	a.closed(sotw1)
	if len(a.streams) != 0 {
		t.Error("a closed stream is remembered")
	}
}

// TestCurrentFollowsSnapshotsWithClustersEnvoyHas: over delta xDS a snapshot that changes only
// routes sends Envoy no clusters, so there is no CDS ACK of it; ext_proc still decides with its
// Topology, since every cluster it names is in the Envoy. A snapshot with a new cluster waits for
// the ACK that brings it.
func TestCurrentFollowsSnapshotsWithClustersEnvoyHas(t *testing.T) {
	a := newAcks(zap.NewNop(), newMetrics(prometheus.NewRegistry()), clock.RealClock{}, time.Hour)
	t1, t2, t3 := &discovery.Topology{Version: "t1"}, &discovery.Topology{Version: "t2"}, &discovery.Topology{Version: "t3"}
	a.open(delta1)
	ack := func(version, nonce string) {
		a.sent(delta1, resourcev3.ClusterType, version, nonce)
		a.received(delta1, &corev3.Node{Id: "front-1"}, nonce, nil)
	}
	a.publish("v1", []string{"all", "old"}, t1)
	ack("v1", "n1")
	if got := a.currentTopology(); got != t1 {
		t.Fatalf("after the ACK of v1: %v, want t1", got)
	}
	a.publish("v2", []string{"old", "all"}, t2) // routes changed, clusters not: no CDS push, no ACK
	if got := a.currentTopology(); got != t2 {
		t.Errorf("a snapshot with only clusters the Envoy has: Current %v, want t2", got)
	}
	a.publish("v3", []string{"all", "old", "new"}, t3)
	if got := a.currentTopology(); got != t2 {
		t.Errorf("a snapshot with a cluster the Envoy lacks: Current %v, want t2 until its ACK", got)
	}
	ack("v3", "n3")
	if got := a.currentTopology(); got != t3 {
		t.Errorf("after the ACK of v3: %v, want t3", got)
	}
}

// go-control-plane numbers SotW and delta streams apart, each from 1.
var sotw1, delta1 = streamKey{id: 1}, streamKey{delta: true, id: 1}

// TestCurrentNamesOnlyClustersEveryEnvoyHas: the one ACK gate. While one Envoy holds ext_proc back
// at an older snapshot, that snapshot's Topology is used only if every cluster it names is still in
// the Envoys that moved on: a cluster that left (its grace period over) is gone from an Envoy that
// acknowledged the snapshot without it, so ext_proc gets no Topology (Envoy's route table decides)
// rather than name it.
func TestCurrentNamesOnlyClustersEveryEnvoyHas(t *testing.T) {
	a := newAcks(zap.NewNop(), newMetrics(prometheus.NewRegistry()), clock.RealClock{}, time.Hour)
	t1, t2 := &discovery.Topology{Version: "t1"}, &discovery.Topology{Version: "t2"}
	ack := func(id streamKey, version, nonce string) {
		a.sent(id, resourcev3.ClusterType, version, nonce)
		a.received(id, &corev3.Node{Id: "front"}, nonce, nil)
	}
	a.open(sotw1)
	a.open(delta1)
	a.publish("v1", []string{"all", "old", "gone"}, t1)
	ack(sotw1, "v1", "s1")
	ack(delta1, "v1", "d1")
	if got := a.currentTopology(); got != t1 {
		t.Fatalf("both Envoys acknowledged v1: Current %v, want t1", got)
	}
	if got := testutil.ToFloat64(a.m.readyClusters); got != 3 {
		t.Errorf("skewgate_xds_acked_clusters = %v, want v1's 3", got)
	}
	// A snapshot that only drops a cluster: the Envoy still at v1 has every cluster of it.
	t15 := &discovery.Topology{Version: "t1.5"}
	a.publish("v1.5", []string{"all", "old"}, t15)
	ack(sotw1, "v1.5", "s15")
	if got := a.currentTopology(); got != t15 {
		t.Fatalf("one Envoy at v1.5, the other at v1 (a superset): Current %v, want t1.5", got)
	}
	ack(delta1, "v1.5", "d15")
	// v2 adds "new" and drops "old" (its grace period over): one Envoy takes it, the other not yet.
	// Neither v1.5 (names "old") nor v2 (names "new") is in both.
	a.publish("v2", []string{"all", "new"}, t2)
	ack(sotw1, "v2", "s2")
	if got := a.currentTopology(); got != nil {
		t.Errorf("one Envoy without %q, the other without %q: Current %v, want nil", "old", "new", got)
	}
	if got := testutil.ToFloat64(a.m.readyClusters); got != 0 {
		t.Errorf("skewgate_xds_acked_clusters = %v with no Topology for ext_proc, want 0", got)
	}
	ack(delta1, "v2", "d2")
	if got := a.currentTopology(); got != t2 {
		t.Errorf("both at v2: Current %v, want t2", got)
	}
}
