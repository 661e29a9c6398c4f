package dataplane

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// chooseHost is LoadBalancerBase::chooseHost with the route's retry host predicate: up to
// host_selection_retry_max_attempts+1 picks (default 1 re-pick) until the predicate
// (previous_hosts: not tried before) accepts one; after the last attempt the last pick is used
// anyway. nil: no host may be chosen (UH).
func (c *cluster) chooseHost(tried map[*host]bool, reattempts int) *host {
	var h *host
	for range reattempts + 1 {
		if h = c.pickOnce(); h == nil || !tried[h] {
			return h
		}
	}
	return h
}

// hostsToUse is the healthy host set, or every host in panic mode: when the healthy percentage is
// below healthy_panic_threshold (default 50%). With threshold 0 the cluster never panics and a
// cluster without a healthy host answers no host (source/common/upstream/load_balancer_impl.cc:
// isHostSetInPanic). Outlier-ejected hosts are not healthy.
func (c *cluster) hostsToUse() []*host {
	var healthy []*host
	for _, h := range c.hosts {
		if h.available() {
			healthy = append(healthy, h)
		}
	}
	threshold := 50.0
	if p := c.cfg.GetCommonLbConfig().GetHealthyPanicThreshold(); p != nil {
		threshold = p.Value
	}
	if len(c.hosts) > 0 && 100*float64(len(healthy))/float64(len(c.hosts)) < threshold {
		return c.hosts
	}
	return healthy
}

// pickOnce picks one host by the cluster's lb_policy.
func (c *cluster) pickOnce() *host {
	hosts := c.hostsToUse()
	if len(hosts) == 0 {
		return nil
	}
	c.traffic.Store(true)
	switch c.cfg.LbPolicy {
	case clusterv3.Cluster_LEAST_REQUEST:
		return c.leastRequest(hosts)
	case clusterv3.Cluster_ROUND_ROBIN:
		// RoundRobinLoadBalancer with equal weights: hosts in turn, from a random start.
		if c.rr.Load() == 0 {
			c.rr.CompareAndSwap(0, uint64(c.dp.intn(1<<30))+1)
		}
		return hosts[int(c.rr.Add(1)%uint64(len(hosts)))]
	case clusterv3.Cluster_RANDOM:
		return hosts[c.dp.intn(len(hosts))]
	}
	return hosts[c.dp.intn(len(hosts))]
}

// leastRequest is LeastRequestLoadBalancer::unweightedHostPickNChoices (source/extensions/
// load_balancing_policies/least_request/least_request_lb.cc; all weights equal, selection method
// N_CHOICES, the default): choice_count (default 2) hosts sampled at random with replacement; a
// later sample replaces the candidate only with strictly fewer active requests, so ties go to the
// earlier, random, sample.
func (c *cluster) leastRequest(hosts []*host) *host {
	n := 2
	if cc := c.cfg.GetLeastRequestLbConfig().GetChoiceCount(); cc != nil {
		n = int(cc.Value)
	}
	var cand *host
	for range n {
		s := hosts[c.dp.intn(len(hosts))]
		if cand == nil || s.active.Load() < cand.active.Load() {
			cand = s
		}
	}
	return cand
}
