package serve

import (
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

// TestTopologyViewShowsWhatExtProcDecidesWith: /topology shows the Topology ext_proc decides with
// (the newest every Envoy acknowledged), names discovery's newer one, and falls back to discovery's
// only while no Envoy has acknowledged any, saying so.
func TestTopologyViewShowsWhatExtProcDecidesWith(t *testing.T) {
	acked := discovery.Build("t-1", time.Unix(1, 0), nil)
	newer := discovery.Build("t-2", time.Unix(2, 0), nil)

	v, ok := newTopologyView(acked, newer, "s-1", nil)
	if !ok || v.Version != "t-1" || !v.Deciding || v.Discovered != "t-2" || v.Snapshot != "s-1" {
		t.Errorf("acked t-1, discovered t-2: view %+v, %v", v, ok)
	}
	v, ok = newTopologyView(nil, newer, "", nil)
	if !ok || v.Version != "t-2" || v.Deciding || v.Discovered != "t-2" {
		t.Errorf("nothing acked: view %+v, %v; want discovery's t-2, not deciding", v, ok)
	}
	if v, ok := newTopologyView(nil, nil, "", nil); ok {
		t.Errorf("no Topology at all: view %+v, want none", v)
	}
}
