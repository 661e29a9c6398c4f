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
)

// TestNackDetailsAreBounded: an Envoy that NACKs every push with a new 16 KiB detail leaves nothing
// behind but the latest NACK per type; the same NACK repeated is logged once.
func TestNackDetailsAreBounded(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	m := newMetrics(prometheus.NewRegistry())
	a := newAcks(zap.NewNop(), m, time.Now) // the observer keeps every line: first measure without it
	a.open(1, modeSotW)
	node := &corev3.Node{Id: "envoy-" + strings.Repeat("x", 10000)}
	nack := func(i int, detail string) {
		nonce := strconv.Itoa(i)
		a.sent(1, resourcev3.ClusterType, "v1", nonce)
		a.received(1, node, nonce, &detail)
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
	if got := len(a.streams[1].nacked); got != 1 {
		t.Errorf("%d NACK entries remembered for one type, want 1", got)
	}
	if got := len(a.streams[1].node); got > maxNodeID {
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
	a.sent(1, resourcev3.ClusterType, "v2", "ack")
	a.received(1, node, "ack", nil)
	nack(n+200, "same")
	if got := logs.Len(); got != 2 {
		t.Errorf("a NACK after an ACK: %d lines in all, want 2", got)
	}
	a.closed(1, modeSotW)
	if len(a.streams) != 0 {
		t.Error("a closed stream is remembered")
	}
}
