package xds

import (
	"context"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// snapshotCache is the cache the xDS server serves from: go-control-plane's snapshot cache in ADS
// mode, except that state-of-the-world SDS requests are answered by a second cache, not in ADS
// mode, that holds the same snapshots.
//
// Why: in ADS mode the cache answers a state-of-the-world request that names resources only when it
// names every resource of that type in the snapshot (pkg/cache/v3/simple.go, respond: "ADS mode:
// not responding to request ... not listed"). Envoy never names every secret at once on a start:
// it asks for the secrets its clusters' transport sockets name as soon as it applied the clusters
// (source/common/upstream/cds_api_helper.cc pauses SDS while it applies a CDS response, so those
// watches go out as one request), and for the listener's secrets only once the cluster manager
// initialized and LDS answered (source/common/listener_manager/lds_api.cc; both at the commits
// test/dataplane/CONFORMANCE.md row 26a names). The clusters wait for
// their secrets (they are init targets), so in ADS mode every start waits for SDS's
// initial_fetch_timeout (15 s unset: source/common/config/utility.cc,
// configSourceInitialFetchTimeout, in a 2026 main copy), after which the clusters initialize without their secrets;
// the test data plane, which has no such timeout, never serves.
//
// Not in ADS mode the cache answers with the requested secrets that the snapshot has, and answers
// again whenever the request names a secret it has not returned on the stream (CreateWatch compares
// the subscription's returned resources), so the listener's secrets arrive as soon as they are
// asked for. Secrets reference nothing, so answering a part of them breaks no ordering Envoy needs.
// Every other type, and SDS over delta (which has no such check), stay with the ADS-mode cache,
// which answers open watches in type order (clusters, listeners, routes, secrets).
type snapshotCache struct {
	cachev3.SnapshotCache
	sotwSecrets cachev3.SnapshotCache
}

func newSnapshotCache(logger log.Logger) *snapshotCache {
	return &snapshotCache{
		SnapshotCache: cachev3.NewSnapshotCache(true, constHash{}, logger),
		sotwSecrets:   cachev3.NewSnapshotCache(false, constHash{}, logger),
	}
}

// CreateWatch sends state-of-the-world SDS watches to the non-ADS cache.
func (c *snapshotCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() == resourcev3.SecretType {
		return c.sotwSecrets.CreateWatch(req, sub, ch)
	}
	return c.SnapshotCache.CreateWatch(req, sub, ch)
}

// SetSnapshot sets snap in both caches: the ADS-mode cache first, so that clusters, listeners and
// routes go out before the secrets, as they would in the ADS-mode cache's own order.
func (c *snapshotCache) SetSnapshot(ctx context.Context, node string, snap cachev3.ResourceSnapshot) error {
	if err := c.SnapshotCache.SetSnapshot(ctx, node, snap); err != nil {
		return err
	}
	return c.sotwSecrets.SetSnapshot(ctx, node, snap)
}

// ClearSnapshot clears node in both caches.
func (c *snapshotCache) ClearSnapshot(node string) {
	c.SnapshotCache.ClearSnapshot(node)
	c.sotwSecrets.ClearSnapshot(node)
}
