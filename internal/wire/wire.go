// Package wire is the contract between the Envoy config that xds serves, the ext_proc service and the
// bootstrap: header names, cluster names and the ext_proc processing mode. Everything that both sides
// must agree on lives here and nowhere else.
package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

const (
	// RouteHeader carries the cluster ext_proc chose. The route table has a route that matches on its
	// presence and takes the cluster from it (RouteAction.cluster_header); without it the default
	// route balances over AllCluster. Clients' copies are removed before ext_proc runs.
	RouteHeader = "x-skewgate-cluster"

	// AllCluster balances over every known upstream; requests without RouteHeader go there.
	AllCluster = "skewgate-all"

	// ExtProcCluster is the gRPC cluster through which Envoy reaches the ext_proc service.
	ExtProcCluster = "skewgate-extproc"

	// XDSCluster is the gRPC cluster through which Envoy reaches the ADS server (bootstrap only).
	XDSCluster = "skewgate-xds"

	// ListenerName and RouteConfigName name the single front listener and its route table.
	ListenerName    = "skewgate-front"
	RouteConfigName = "skewgate-routes"

	// upstreamPrefix and setPrefix start the names of per-upstream and capability-set clusters.
	upstreamPrefix = "skewgate-upstream-"
	setPrefix      = "skewgate-set-"

	// UpstreamSNI is the server name skewgate and Envoy verify every apiserver certificate against:
	// every apiserver serving certificate carries it (kubeadm: GetAPIServerAltNames in
	// cmd/kubeadm/app/util/pkiutil; the apiserver's own self-signed certificate lists the service names).
	UpstreamSNI = "kubernetes.default.svc"
)

// Identity headers the apiserver's request-header authenticator trusts from the front-proxy client
// certificate (k8s.io/apiserver/pkg/authentication/request/headerrequest). The front removes every
// client copy and sets them itself only from a verified client certificate.
const (
	RemoteUserHeader    = "x-remote-user"
	RemoteGroupHeader   = "x-remote-group"
	RemoteUIDHeader     = "x-remote-uid"
	RemoteExtraPrefix   = "x-remote-extra-"
	ForwardedCertHeader = "x-forwarded-client-cert"
)

// HTTP1Suffix marks the HTTP/1.1 twin of a cluster. Every cluster speaks HTTP/2 to the apiservers,
// except that exec, attach and port-forward upgrade an HTTP/1.1 connection (SPDY/3.1 or WebSocket) and
// cannot ride HTTP/2 to an apiserver, so each cluster has a twin that speaks HTTP/1.1 and carries the
// upgrades. ':' cannot occur in an upstream name (a hostname) nor in a set hash, so twins never
// collide with other clusters.
const HTTP1Suffix = ":http1"

// HTTP1Cluster names the HTTP/1.1 twin of a cluster.
func HTTP1Cluster(cluster string) string { return cluster + HTTP1Suffix }

// AnonSuffix marks the anonymous twin of an HTTP/2 apiserver cluster: it presents no client
// certificate to the apiservers, so a request without credentials meets each apiserver's own
// anonymous policy (--anonymous-auth, AuthenticationConfiguration) exactly as it would directly.
// Over the front-proxy certificate the apiserver would either reject it (no user header: 401) or
// believe whatever identity the front asserted. Upgrades have no anonymous twin: an upgrade without
// credentials rides the HTTP/1.1 twin with no identity header and is refused by the apiserver.
const AnonSuffix = ":anon"

// AnonCluster names the anonymous twin of an HTTP/2 cluster.
func AnonCluster(cluster string) string { return cluster + AnonSuffix }

// RoutedClusterPattern is the RE2 pattern a RouteHeader value must match for the cluster_header
// routes to take it: the apiserver clusters and their twins, never the gRPC clusters (ExtProcCluster,
// XDSCluster), so no header value can send a request to skewgate itself.
const RoutedClusterPattern = `skewgate-(all|upstream-[^:]+|set-[0-9a-f]{12})(:http1|:anon)?`

// CredentialsMetadata is gRPC metadata Envoy adds to the ext_proc stream (a per-route override) of a
// request that carries no credentials at all: no Authorization header and no verified client
// certificate. The processor never sees Authorization itself (forward_rules), so this is how it knows
// to keep the request anonymous: it names the anonymous twin (AnonCluster) of the cluster it picks
// and sets no identity header, so each apiserver applies its own anonymous policy.
const (
	CredentialsMetadata = "x-skewgate-credentials"
	CredentialsNone     = "none"
)

// HealthCheckUser is the identity Envoy's /readyz health checks carry (as X-Remote-User over the
// front-proxy certificate). A request with the front-proxy certificate but no X-Remote-User is
// rejected (401) by the apiserver's authenticator, so the checks need a name; this one has no group
// beyond system:authenticated, which the default system:public-info-viewer binding allows /readyz.
const HealthCheckUser = "skewgate-health-check"

// UpstreamCluster names the cluster that holds exactly one upstream.
func UpstreamCluster(upstream string) string { return upstreamPrefix + upstream }

// SetCluster names the cluster for a set of upstreams (names, in any order). A set of one is that
// upstream's own cluster; larger sets get a name derived from their sorted members, so the same set
// keeps the same cluster across Topology versions and restarts (make-before-break relies on it).
func SetCluster(members []string) string {
	if len(members) == 1 {
		return UpstreamCluster(members[0])
	}
	h := sha256.New()
	for _, m := range slices.Sorted(slices.Values(members)) {
		h.Write([]byte(m))
		h.Write([]byte{0})
	}
	return setPrefix + hex.EncodeToString(h.Sum(nil))[:12]
}
