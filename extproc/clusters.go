package extproc

import (
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// clusterNames maps the sets of one Topology's decisions to the Envoy clusters that hold them, as
// xds names them (internal/wire): discovery names sets by their members and knows nothing of Envoy.
// Built once per Topology version, so a decision costs a map lookup, not a hash.
type clusterNames struct {
	names map[discovery.SetID]string
}

func newClusterNames(t *discovery.Topology) *clusterNames {
	c := &clusterNames{names: make(map[discovery.SetID]string, len(t.Upstreams)+len(t.Sets))}
	for _, u := range t.Upstreams {
		c.names[discovery.NewSetID([]string{u.Name})] = wire.UpstreamCluster(u.Name)
	}
	for _, s := range t.Sets {
		c.names[s.ID] = wire.SetCluster(s.Members)
	}
	return c
}

// of names the cluster of set; a set the Topology does not list (never, for its own decisions) is
// named the way xds would name it.
func (c *clusterNames) of(set discovery.SetID) string {
	if n, ok := c.names[set]; ok {
		return n
	}
	return wire.SetCluster(set.Members())
}

// clustersFor returns the cluster names of t, built once per Topology version.
func (s *Server) clustersFor(t *discovery.Topology) *clusterNames {
	return s.clusterNames.get(t, newClusterNames)
}
