package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// sync reads the Leases, reconciles the workers and, only if an input of the Topology changed since
// the last Build, builds and publishes a new one. It returns when it wants to run again (zero: only
// on events): the earliest Lease expiry, capability expiry or departure. Each sync is counted by its
// result (skewgate_discovery_syncs_total).
func (c *Controller) sync(ctx context.Context) time.Time {
	next, result := c.syncOnce(ctx)
	c.metrics.syncs.WithLabelValues(result).Inc()
	return next
}

func (c *Controller) syncOnce(ctx context.Context) (next time.Time, result string) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	answering := map[string]bool{}
	for name, s := range c.states {
		if s.ready {
			answering[name] = true
		}
	}
	leaseEvent := c.leaseEvent
	c.mu.Unlock()

	leases := c.leases()
	view := readLeases(leases, c.cfg.Static, c.cfg.Policy, c.endpoints(), now, c.cfg.StaleAfter, answering)
	known := make(map[string]bool, len(c.workers))
	for name := range c.workers {
		known[name] = true
	}
	view.limit(c.cfg.MaxUpstreams, known)
	c.noteRejections(view.rejected, leases)
	c.noteIgnored(view.ignored)
	c.reconcileWorkers(ctx, view.candidates)

	facts, initialized, next := c.facts(view.candidates, now)
	// A Lease going stale is an event nobody sends: run again when the earliest live one expires.
	next = minTime(next, view.nextExpiry)
	if deadline := c.started.Add(c.cfg.InitialTimeout); !initialized && c.current.Load() == nil && now.Before(deadline) {
		// Wait for every upstream's first fetch (each one asks for a sync), but not forever.
		return minTime(next, deadline), syncWaiting
	}
	inputs := inputsDigest(facts, view.ignored)
	if c.current.Load() != nil && inputs == c.inputs {
		c.settleLeaseEvent(leaseEvent, false)
		return next, syncUnchanged
	}

	start := c.cfg.Clock.Now()
	gen := c.generation + 1
	t := build(c.bootID+"-"+strconv.FormatInt(gen, 10), now, facts, c.memo)
	t.Ignored = view.ignored
	// Every Build, published or not: its wants follow from the inputs, which changed.
	c.applyOpenAPIWants(t)
	fp := fingerprint(t)
	c.metrics.rebuildDuration.Observe(c.cfg.Clock.Since(start).Seconds())
	c.inputs = inputs
	if c.current.Load() != nil && fp == c.fingerprint {
		c.settleLeaseEvent(leaseEvent, false)
		return next, syncRebuilt
	}
	c.generation, c.fingerprint = gen, fp
	c.mu.Lock()
	c.current.Store(t)
	close(c.notify)
	c.notify = make(chan struct{})
	c.mu.Unlock()
	c.settleLeaseEvent(leaseEvent, true)
	c.metrics.generation.Set(float64(gen))
	c.metrics.setUpstreams(slices.Concat(t.Upstreams, t.Unproven))
	c.log.Info("topology published", zap.String("version", t.Version), zap.Int("upstreams", len(t.Upstreams)),
		zap.Int("unproven", len(t.Unproven)), zap.Int("sets", len(t.Sets)), zap.Int("skewed", len(t.Skewed())),
		zap.Duration("rebuild", c.cfg.Clock.Since(start)))
	return next, syncPublished
}

// settleLeaseEvent ends the wait that started with the Lease change at event (read at the start of
// the sync): a publish observes it, a sync that changed nothing forgets it, so a later publish never
// observes a change it does not reflect. A change that arrived during the sync stays pending.
func (c *Controller) settleLeaseEvent(event time.Time, published bool) {
	if event.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leaseEvent.Equal(event) {
		return
	}
	if published {
		c.metrics.leaseToTopology.Observe(c.cfg.Clock.Since(event).Seconds())
	}
	c.leaseEvent = time.Time{}
}

// facts assembles what Build needs from the candidates, the workers' states and the recently
// departed upstreams.
func (c *Controller) facts(cands []candidate, now time.Time) (facts []UpstreamFacts, initialized bool, next time.Time) {
	initialized = true
	aggregated := []string{allAggregated} // until the APIServices are known, any key may be one's
	if c.apiServicesSynced() {
		aggregated = aggregatedAPIs(c.apiServices())
	}
	c.mu.Lock()
	facts = make([]UpstreamFacts, 0, len(cands)+len(c.departed))
	for _, cand := range cands {
		s := c.states[cand.Name]
		initialized = initialized && s.initialized
		f := UpstreamFacts{Upstream: Upstream{
			Name: cand.Name, Address: cand.Address, Source: cand.Source, LeaseName: cand.LeaseName, Holder: cand.Holder,
			Version: s.version, Ready: s.ready, Stale: s.fetchFailing && s.apis != nil,
		}, AggregatedAPIs: aggregated}
		if s.apis != nil || s.api != nil {
			if expiry := s.lastFetchOK.Add(c.cfg.CapabilityTTL); !s.fetchFailing || expiry.After(now) {
				f.API, f.APIs = s.api, s.apis
				// The OpenAPI of an upstream goes with its capabilities. The maps are never modified.
				f.OpenAPI, f.OpenAPIDocs, _ = c.openapi.View(cand.Name)
				if s.fetchFailing {
					next = minTime(next, expiry)
				}
			} else {
				f.Stale = false // expired: no capabilities at all
			}
		}
		facts = append(facts, f)
	}
	c.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(c.departed)) {
		d := c.departed[name]
		if !d.until.After(now) {
			delete(c.departed, name)
			continue
		}
		facts = append(facts, UpstreamFacts{Upstream: Upstream{Name: name}, API: d.api, APIs: d.apis, Departed: true})
		next = minTime(next, d.until)
	}
	return facts, initialized, next
}

// inputsDigest identifies everything Build reads in facts, and the ignored Leases: equal digests
// give equal Topologies, so the sync can skip the Build. Documents are identified by their hash.
func inputsDigest(facts []UpstreamFacts, ignored []IgnoredLease) [sha256.Size]byte {
	var b strings.Builder
	field := func(s string) { b.WriteString(s); b.WriteByte(0) }
	flag := func(v bool) { field(strconv.FormatBool(v)) }
	doc := func(d *Document) {
		if d == nil {
			field("-")
			return
		}
		field(d.Hash)
	}
	openapi := func(idx *OpenAPIIndex, docs map[string]*OpenAPISpec) {
		if idx == nil {
			field("-")
		} else {
			field("i" + idx.Hash) // "i": an empty index (OpenAPI v3 off) is not a missing one
		}
		for _, k := range slices.Sorted(maps.Keys(docs)) {
			field(k)
			field(docs[k].Hash)
		}
	}
	for _, f := range facts {
		field(f.Name)
		field(f.Address)
		field(string(f.Source))
		field(f.LeaseName)
		field(f.Holder)
		field(f.Version)
		flag(f.Ready)
		flag(f.Stale)
		flag(f.Departed)
		doc(f.API)
		doc(f.APIs)
		openapi(f.OpenAPI, f.OpenAPIDocs)
		field(strings.Join(f.AggregatedAPIs, ","))
		b.WriteByte(1)
	}
	for _, l := range ignored {
		field(l.Lease)
		field(l.Hostname)
		field(l.Reason)
		b.WriteByte(1)
	}
	return sha256.Sum256([]byte(b.String()))
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// fingerprint hashes everything a consumer can see in a Topology but its version and time.
func fingerprint(t *Topology) [32]byte {
	data, err := json.Marshal(struct {
		U  []Upstream
		P  []Upstream
		I  []IgnoredLease
		S  []CapabilitySet
		K  []SkewedResource
		E1 string
		E2 string
		// OpenAPI: the non-default decisions (their hashes name merged documents too), the front's index
		// (it names the default keys' hashes), what the controller fetches, and why a key is degraded
		// or routed only. A key that turns routed only may keep its decision (its fallback is the route
		// it had while one upstream listed it): its reason alone must publish.
		OD []OpenAPIKeyDecision
		OI string
		OW map[string][]string
		OG map[string]string
		OR map[string]string
	}{t.Upstreams, t.Unproven, t.Ignored, t.Sets, t.Skewed(), t.API.ETag, t.APIs.ETag,
		t.OpenAPIDecisions(), openAPIIndexHash(t), t.OpenAPIWants(), t.OpenAPIDegraded(), t.OpenAPIRoutedOnly()})
	if err != nil {
		panic(err)
	}
	return sha256.Sum256(data)
}

func openAPIIndexHash(t *Topology) string {
	if i := t.OpenAPIIndex(); i != nil {
		return i.Hash
	}
	return ""
}

func (c *Controller) noteRejections(rejected []rejection, leases []*coordinationv1.Lease) {
	for _, r := range rejected {
		digest := sha256.Sum256([]byte(r.Annotation))
		if prev, ok := c.seenRej[r.Lease]; ok && prev == digest {
			continue
		}
		c.seenRej[r.Lease] = digest
		c.metrics.rejectedLeases.WithLabelValues(r.Reason).Inc()
		c.log.Warn("identity Lease address refused by the address policy; never routed to",
			zap.String("lease", r.Lease), zap.String("reason", r.Reason), zap.Error(r.Err))
	}
	if len(c.seenRej) == 0 {
		return
	}
	exists := make(map[string]bool, len(leases))
	for _, l := range leases {
		exists[l.Name] = true
	}
	maps.DeleteFunc(c.seenRej, func(name string, _ [sha256.Size]byte) bool { return !exists[name] })
}

// noteIgnored sets the ignored-Lease gauges and logs the Leases that became ignored (or changed
// reason) since the last sync: one line per reason with the count and a few names, so a flood of
// forged Leases logs a line, not a line per Lease. The address policy's refusals are logged by
// noteRejections.
func (c *Controller) noteIgnored(ignored []IgnoredLease) {
	counts := map[string]int{}
	fresh := map[string][]IgnoredLease{}
	now := make(map[string]string, len(ignored))
	for _, l := range ignored {
		counts[l.Reason]++
		now[l.Lease] = l.Reason
		if c.ignoredLogged[l.Lease] != l.Reason && l.Reason != RejectMalformed && l.Reason != RejectNotAllowed {
			fresh[l.Reason] = append(fresh[l.Reason], l)
		}
	}
	c.ignoredLogged = now
	for _, r := range ignoredReasons {
		c.metrics.ignoredLeases.WithLabelValues(r).Set(float64(counts[r]))
		ls := fresh[r]
		if len(ls) == 0 {
			continue
		}
		var names []string
		for _, l := range ls[:min(len(ls), 5)] {
			names = append(names, l.Lease+" ("+l.Hostname+")")
		}
		c.log.Warn("identity Leases are no upstream", zap.String("reason", r), zap.Int("new", len(ls)), zap.Int("total", counts[r]),
			zap.Strings("leases", names), zap.String("hint", ls[0].Hint))
	}
}
