package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/xds"
)

// Ready reports whether the first Topology is published to the xDS cache.
func (s *Server) Ready() bool {
	v, _ := s.XDS.Version()
	return s.Discovery.Current() != nil && v != ""
}

// TopologyView is the JSON document /topology serves and `skewgate topology` prints: the Topology
// ext_proc decides with (the newest whose snapshot every connected Envoy has acknowledged), or, while
// there is none, discovery's newest (Deciding false: Envoy's route table decides alone).
type TopologyView struct {
	Version   string    `json:"version"`
	Generated time.Time `json:"generated"`
	// Deciding says ext_proc decides with this Topology; Discovered is discovery's newest version,
	// newer than Version while an Envoy has yet to acknowledge its snapshot.
	Deciding   bool                 `json:"deciding"`
	Discovered string               `json:"discovered"`
	Snapshot   string               `json:"snapshot"`
	Upstreams  []discovery.Upstream `json:"upstreams"`
	// Unproven upstreams have no Envoy cluster yet; Ignored Leases are no upstream (with a hint).
	Unproven []discovery.Upstream       `json:"unproven,omitempty"`
	Ignored  []discovery.IgnoredLease   `json:"ignored,omitempty"`
	Sets     []discovery.CapabilitySet  `json:"sets"`
	Skewed   []discovery.SkewedResource `json:"skewed"`
	// OpenAPI lists the OpenAPI v3 documents that do not take the default route.
	OpenAPI []discovery.OpenAPIKeyDecision `json:"openapi,omitempty"`
	// Unexpressed are the rows of the decision table (skewed resource keys, OpenAPI v3 documents)
	// that Envoy's snapshot has no route of its own for: ext_proc decides them; while it fails open
	// they take the default route (OpenAPI documents: the schema routes).
	Unexpressed []xds.UnexpressedKey `json:"unexpressed,omitempty"`
}

// newTopologyView shows deciding (ext_proc's Topology) if there is one, else latest (discovery's);
// ok is false when there is neither.
func newTopologyView(deciding, latest *discovery.Topology, snapshot string, unexpressed []xds.UnexpressedKey) (v TopologyView, ok bool) {
	t := deciding
	if t == nil {
		t = latest
	}
	if t == nil {
		return TopologyView{}, false
	}
	v = TopologyView{Version: t.Version, Generated: t.Generated, Deciding: deciding != nil, Snapshot: snapshot,
		Upstreams: t.Upstreams, Unproven: t.Unproven, Ignored: t.Ignored, Sets: t.Sets, Skewed: t.Skewed(),
		OpenAPI: t.OpenAPIDecisions(), Unexpressed: unexpressed}
	if latest != nil {
		v.Discovered = latest.Version
	}
	return v, true
}

func (s *Server) httpHandler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if dead, err := s.components.deadComponents(); len(dead) > 0 {
			http.Error(w, fmt.Sprintf("dead: %s (%v); shutting down", strings.Join(dead, ", "), err), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "no Topology published yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/topology", func(w http.ResponseWriter, _ *http.Request) {
		snap, _ := s.XDS.Version()
		v, ok := newTopologyView(s.XDS.Current(), s.Discovery.Current(), snap, s.XDS.Unexpressed())
		if !ok {
			http.Error(w, "no Topology yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
