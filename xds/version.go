package xds

import (
	"context"
	"fmt"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EnvoyRelease is one Envoy minor release skewgate configures, from its oldest acceptable patch.
type EnvoyRelease struct {
	Minor      uint32
	FloorPatch uint32
}

func (r EnvoyRelease) String() string { return fmt.Sprintf("1.%d.%d", r.Minor, r.FloorPatch) }

// SupportedEnvoys are the Envoy releases skewgate configures, oldest first: the four minors Envoy
// upstream supports (each for a year after its .0; RELEASES.md), each from the first patch that fixes
// CVE-2026-73548 (GHSA-3vhp-c83q-jqc2: payload sent before a generic upgrade such as spdy/3.1 is
// accepted could be read as a pipelined HTTP/1 request on a shared upstream connection, which through
// skewgate carries the front-proxy certificate). The fix is listed in changelogs/1.37.6.yaml,
// 1.38.4.yaml, 1.39.1.yaml and 1.40.0.yaml (runtime guard
// envoy.reloadable_features.http_pause_generic_upgrade_request_body). envoy/README.md explains the
// set; keep both in step.
//
// A minor newer than the last entry is accepted: it was cut from a main branch that has the fix.
var SupportedEnvoys = []EnvoyRelease{{37, 6}, {38, 4}, {39, 1}, {40, 0}}

// Refusal reasons (the reason label of skewgate_xds_refused_nodes_total).
const (
	refusedTooOld         = "too_old"
	refusedUnknownVersion = "unknown_version"
	refusedNotEnvoy       = "not_envoy"
)

var refusalReasons = []string{refusedTooOld, refusedUnknownVersion, refusedNotEnvoy}

// checkNode decides whether skewgate configures the xDS client node: it must say it is Envoy
// (user_agent_name) at a supported version (user_agent_build_version). Envoy fills both in from its
// build unless the bootstrap sets them (source/server/server.cc, where the server initializes its
// node, in a 2026 main copy: test/dataplane/CONFORMANCE.md row 27), so
// this guards against running an old or vulnerable Envoy by accident, not against a client that lies.
// It returns the refusal reason and a message, or "" when the node is accepted.
func checkNode(n *corev3.Node) (reason, msg string) {
	if n.GetUserAgentName() != "envoy" {
		return refusedNotEnvoy, fmt.Sprintf("user_agent_name %q is not envoy", n.GetUserAgentName())
	}
	v := n.GetUserAgentBuildVersion().GetVersion()
	if v == nil {
		return refusedUnknownVersion, "no user_agent_build_version"
	}
	got := fmt.Sprintf("%d.%d.%d", v.GetMajorNumber(), v.GetMinorNumber(), v.GetPatch())
	if v.GetMajorNumber() != 1 {
		return refusedUnknownVersion, "Envoy " + got + " is not a 1.x release"
	}
	oldest, newest := SupportedEnvoys[0], SupportedEnvoys[len(SupportedEnvoys)-1]
	if v.GetMinorNumber() > newest.Minor {
		return "", ""
	}
	for _, r := range SupportedEnvoys {
		if r.Minor == v.GetMinorNumber() {
			if v.GetPatch() < r.FloorPatch {
				return refusedTooOld, fmt.Sprintf("Envoy %s lacks the CVE-2026-73548 fix: use %s or later", got, r)
			}
			return "", ""
		}
	}
	return refusedTooOld, fmt.Sprintf("Envoy %s is older than the oldest supported release %s", got, oldest)
}

// maxRefusalLogKeys bounds the node id+version pairs remembered for logging a refusal once: node ids
// come from clients.
const maxRefusalLogKeys = 4096

// versionGate refuses every xDS stream whose first request comes from a node checkNode rejects: the
// stream ends with FailedPrecondition before any resource is sent. Accepted streams pass through to
// next unchanged.
type versionGate struct {
	next serverv3.Callbacks
	log  *zap.Logger
	m    *metrics

	mu       sync.Mutex
	accepted map[streamKey]bool // streams whose first request passed
	logged   map[string]bool
}

type streamKey struct {
	delta bool
	id    int64
}

func newVersionGate(next serverv3.Callbacks, log *zap.Logger, m *metrics) *versionGate {
	return &versionGate{next: next, log: log, m: m, accepted: map[streamKey]bool{}, logged: map[string]bool{}}
}

// admit checks the first request of stream k (later requests carry no node:
// set_node_on_first_message_only) and returns the error that ends a refused stream.
func (g *versionGate) admit(k streamKey, n *corev3.Node) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.accepted[k] {
		return nil
	}
	reason, msg := checkNode(n)
	if reason == "" {
		g.accepted[k] = true
		return nil
	}
	g.m.refused.WithLabelValues(reason).Inc()
	v := n.GetUserAgentBuildVersion().GetVersion()
	key := fmt.Sprintf("%s\x00%s\x00%d.%d.%d", n.GetId(), n.GetUserAgentName(), v.GetMajorNumber(), v.GetMinorNumber(), v.GetPatch())
	if !g.logged[key] {
		if len(g.logged) >= maxRefusalLogKeys {
			clear(g.logged)
		}
		g.logged[key] = true
		g.log.Error("refusing to configure this Envoy: it gets no listener, route, cluster or secret; see envoy/README.md for the supported releases",
			zap.String("node", n.GetId()), zap.String("reason", reason), zap.String("detail", msg))
	}
	return status.Error(codes.FailedPrecondition, "skewgate: "+msg+"; supported Envoy releases are listed in skewgate's envoy/README.md")
}

func (g *versionGate) forget(k streamKey) {
	g.mu.Lock()
	delete(g.accepted, k)
	g.mu.Unlock()
}

func (g *versionGate) OnStreamOpen(ctx context.Context, id int64, typ string) error {
	return g.next.OnStreamOpen(ctx, id, typ)
}

func (g *versionGate) OnStreamClosed(id int64, n *corev3.Node) {
	g.forget(streamKey{id: id})
	g.next.OnStreamClosed(id, n)
}

func (g *versionGate) OnStreamRequest(id int64, r *discoveryv3.DiscoveryRequest) error {
	if err := g.admit(streamKey{id: id}, r.GetNode()); err != nil {
		return err
	}
	return g.next.OnStreamRequest(id, r)
}

func (g *versionGate) OnStreamResponse(ctx context.Context, id int64, req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	g.next.OnStreamResponse(ctx, id, req, resp)
}

func (g *versionGate) OnDeltaStreamOpen(ctx context.Context, id int64, typ string) error {
	return g.next.OnDeltaStreamOpen(ctx, id, typ)
}

func (g *versionGate) OnDeltaStreamClosed(id int64, n *corev3.Node) {
	g.forget(streamKey{delta: true, id: id})
	g.next.OnDeltaStreamClosed(id, n)
}

func (g *versionGate) OnStreamDeltaRequest(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
	if err := g.admit(streamKey{delta: true, id: id}, r.GetNode()); err != nil {
		return err
	}
	return g.next.OnStreamDeltaRequest(id, r)
}

func (g *versionGate) OnStreamDeltaResponse(id int64, req *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	g.next.OnStreamDeltaResponse(id, req, resp)
}

// OnFetchRequest gates the unary Fetch* methods the same way: each request carries its node.
func (g *versionGate) OnFetchRequest(ctx context.Context, r *discoveryv3.DiscoveryRequest) error {
	if reason, msg := checkNode(r.GetNode()); reason != "" {
		g.m.refused.WithLabelValues(reason).Inc()
		return status.Error(codes.FailedPrecondition, "skewgate: "+msg)
	}
	return g.next.OnFetchRequest(ctx, r)
}

func (g *versionGate) OnFetchResponse(req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	g.next.OnFetchResponse(req, resp)
}
