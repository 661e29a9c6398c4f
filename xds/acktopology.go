package xds

import (
	"slices"

	"github.com/skewgate/skewgate/discovery"
)

// Which Topology ext_proc decides with. A decision names clusters, and a request Envoy sends to a
// cluster it does not have yet gets a 503; a decision from a Topology Envoy never received also
// overrides the route table Envoy keeps, whose skew routes are right for the Topology it has. So
// ext_proc decides with the newest Topology whose snapshot every connected Envoy has acknowledged
// (its clusters: the CDS ACK), and with none (Server.Current returns nil: ext_proc names no cluster
// and Envoy's own route table decides) while an Envoy has acknowledged nothing from this process
// or no Envoy is connected. That covers a restarted skewgate, whose first snapshot the Envoy has
// not acknowledged yet while it still serves with the config of the previous process, even when the
// Topology changed across the restart.

// everyEnvoyHas returns the Topology of the newest version every stream has, or nil. A stream has
// the version whose clusters it acknowledged, and every later one whose clusters are all among
// those: over delta xDS Envoy is sent (and acknowledges) clusters only when they change
// (go-control-plane's delta cache sends the resources whose hash changed), so a snapshot that
// changed only routes is never acknowledged as CDS, yet every cluster a decision from it names is
// in that Envoy. Called with a.mu held.
func (a *acks) everyEnvoyHas() *discovery.Topology {
	if len(a.streams) == 0 {
		return nil
	}
	oldest := len(a.order)
	for _, s := range a.streams {
		i := slices.Index(a.order, s.acked)
		if i < 0 {
			return nil // nothing acknowledged yet, or a version too old to remember
		}
		for j := len(a.order) - 1; j > i; j-- {
			if subset(a.published[a.order[j]].clusters, s.clusters) {
				i = j
				break
			}
		}
		oldest = min(oldest, i)
	}
	return a.published[a.order[oldest]].topology
}

func subset(a, b map[string]bool) bool {
	for c := range a {
		if !b[c] {
			return false
		}
	}
	return true
}

// replaceLatest records that t translates to the latest published snapshot too (a Topology that
// changed nothing Envoy sees): ext_proc may decide with it once that snapshot is acknowledged.
func (a *acks) replaceLatest(t *discovery.Topology) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.order) == 0 {
		return
	}
	latest := a.order[len(a.order)-1]
	pub := a.published[latest]
	pub.topology = t
	a.published[latest] = pub
	a.recompute()
}

// current is the Topology ext_proc decides with (lock-free: read per request).
func (a *acks) currentTopology() *discovery.Topology { return a.current.Load() }
