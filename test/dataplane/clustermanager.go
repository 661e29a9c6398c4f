package dataplane

import (
	"fmt"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// clusterManager holds the clusters of the accepted CDS resources. A new or changed cluster warms
// first: it serves no request until every host had its first health check, and until then the
// router does not find it (an unknown cluster, NC) or keeps using the version it replaces
// (source/common/upstream/cluster_manager_impl.cc: warming clusters are not in the active map;
// docs cluster_manager "cluster warming"). An unchanged cluster is kept as it is, with its host
// health (CDS updates whose hash did not change are skipped).
type clusterManager struct {
	mu      sync.RWMutex
	active  map[string]*cluster
	warming map[string]*cluster
}

// get returns the active (warmed) cluster of that name, or nil.
func (cm *clusterManager) get(name string) *cluster {
	cm.mu.RLock()
	defer cm.mu.RUnlock()
	return cm.active[name]
}

func (cm *clusterManager) stopAll() {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	for _, c := range cm.active {
		c.stop()
	}
	for _, c := range cm.warming {
		c.stop()
	}
}

// applyClusters takes the complete set of clusters; it returns the SDS secrets they name.
func (d *DataPlane) applyClusters(resources []*anypb.Any) ([]string, error) {
	cfgs := map[string]*clusterv3.Cluster{}
	var order []string
	var refs []string
	for _, a := range resources {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			return nil, err
		}
		if err := c.ValidateAll(); err != nil {
			return nil, err
		}
		if _, dup := cfgs[c.Name]; dup {
			return nil, fmt.Errorf("duplicate cluster %s", c.Name)
		}
		cfgs[c.Name] = &c
		order = append(order, c.Name)
		refs = append(refs, secretNames(c.TransportSocket)...)
		for _, m := range c.TransportSocketMatches {
			refs = append(refs, secretNames(m.TransportSocket)...)
		}
	}
	cm := &d.clusters
	cm.mu.RLock()
	var fresh []*cluster
	for _, name := range order {
		cfg := cfgs[name]
		if old := cm.active[name]; old != nil && proto.Equal(old.cfg, cfg) && cm.warming[name] == nil {
			continue
		}
		if w := cm.warming[name]; w != nil && proto.Equal(w.cfg, cfg) {
			continue
		}
		c, err := newCluster(d, cfg)
		if err != nil {
			cm.mu.RUnlock()
			return nil, err
		}
		fresh = append(fresh, c)
	}
	cm.mu.RUnlock()

	cm.mu.Lock()
	var stopped []*cluster
	for name, c := range cm.active {
		if cfgs[name] == nil {
			delete(cm.active, name)
			stopped = append(stopped, c)
		}
	}
	for name, c := range cm.warming {
		if cfgs[name] == nil {
			delete(cm.warming, name)
			stopped = append(stopped, c)
		}
	}
	for _, c := range fresh {
		if w := cm.warming[c.name]; w != nil {
			stopped = append(stopped, w)
		}
		cm.warming[c.name] = c
	}
	cm.mu.Unlock()
	for _, c := range stopped {
		c.stop()
	}
	for _, c := range fresh {
		c.start(d.ctx)
		go d.promote(c)
	}
	return refs, nil
}

// promote makes a warmed cluster active, replacing the version it updates.
func (d *DataPlane) promote(c *cluster) {
	select {
	case <-c.warmed:
	case <-d.ctx.Done():
		return
	}
	cm := &d.clusters
	cm.mu.Lock()
	if cm.warming[c.name] != c {
		cm.mu.Unlock()
		return // replaced or removed while warming
	}
	delete(cm.warming, c.name)
	old := cm.active[c.name]
	cm.active[c.name] = c
	cm.mu.Unlock()
	if old != nil {
		old.stop()
	}
	d.logf("cluster %s warmed and active (%d hosts)", c.name, len(c.hosts))
	d.checkClusterInit()
}

// warm reports whether every cluster of the last CDS update is active.
func (cm *clusterManager) warm() bool {
	cm.mu.RLock()
	defer cm.mu.RUnlock()
	return len(cm.warming) == 0
}
