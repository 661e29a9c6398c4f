package app

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

// TopologyView is the JSON document /topology serves and `skewgate topology` prints.
type TopologyView struct {
	Version   string               `json:"version"`
	Generated time.Time            `json:"generated"`
	Snapshot  string               `json:"snapshot"`
	Upstreams []discovery.Upstream `json:"upstreams"`
	// Unproven upstreams have no Envoy cluster yet; Ignored Leases are no upstream (with a hint).
	Unproven []discovery.Upstream       `json:"unproven,omitempty"`
	Ignored  []discovery.IgnoredLease   `json:"ignored,omitempty"`
	Sets     []discovery.CapabilitySet  `json:"sets"`
	Skewed   []discovery.SkewedResource `json:"skewed"`
	// OpenAPI lists the OpenAPI v3 documents that do not take the default route.
	OpenAPI []discovery.OpenAPIKeyDecision `json:"openapi,omitempty"`
	// Unexpressed are the skewed keys of Envoy's snapshot without a route of their own: ext_proc
	// decides them; while it fails open they take the default route.
	Unexpressed []xds.UnexpressedKey `json:"unexpressed,omitempty"`
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
		t := s.Discovery.Current()
		if t == nil {
			http.Error(w, "no Topology yet", http.StatusServiceUnavailable)
			return
		}
		snap, _ := s.XDS.Version()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(TopologyView{Version: t.Version, Generated: t.Generated, Snapshot: snap, Upstreams: t.Upstreams,
			Unproven: t.Unproven, Ignored: t.Ignored, Sets: t.Sets, Skewed: t.Skewed(), OpenAPI: t.OpenAPIDecisions(),
			Unexpressed: s.XDS.Unexpressed()})
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
