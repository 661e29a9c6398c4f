package openapi

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Waiting begins the reason of a degraded key whose documents are still to be fetched (its other
// reasons say why its inputs do not merge).
const Waiting = "waiting for"

// decider holds what deciding one key needs, and the Result so far.
type decider struct {
	now      time.Time
	ups      []Upstream
	coverage Coverage
	memo     *Memo
	// aggregated: the keys of group-versions an aggregated APIService serves (routed only).
	aggregated map[string]bool
	res        Result
}

// decide returns the decision for key, recording merged documents, wants and degraded keys in d.res,
// in the steps of the rule (decision.go): agreement, a whole group, else a merge of every group.
func (d *decider) decide(key string) Decision {
	var cov *GVCoverage
	if gv, ok := GroupVersion(key); ok {
		cov = d.coverage[gv] // nil: the group-version has no resources, every upstream listing it serves all
	}
	byHash, listing := d.groupByHash(key, cov)
	if listing == len(d.ups) && len(byHash) == 1 {
		for h := range byHash {
			return Decision{Action: ActionDefault, Hash: h}
		}
	}
	if g := d.readyWholeGroup(byHash, cov); g != nil {
		return Decision{Action: ActionRoute, Members: g.members, Hash: g.hash}
	}
	// Nobody ready serves the whole group-version: merge every group's document.
	return d.merge(key, slices.SortedFunc(maps.Values(byHash), compareGroups))
}

// groupByHash groups the upstreams that list key by their hash for it; listing is how many do.
func (d *decider) groupByHash(key string, cov *GVCoverage) (byHash map[string]*group, listing int) {
	byHash = map[string]*group{}
	for i := range d.ups {
		u := &d.ups[i]
		if u.Index == nil {
			continue
		}
		h, ok := u.Index.Keys[key]
		if !ok {
			continue
		}
		listing++
		g := byHash[h]
		if g == nil {
			g = &group{hash: h, members: NewMembers(len(d.ups))}
			byHash[h] = g
		}
		g.add(i, u)
		if cov != nil {
			g.covered = max(g.covered, cov.Count[i])
		}
	}
	return byHash, listing
}

// readyWholeGroup returns, of the members of each group that serve every resource of the
// group-version (cov nil: every member), the first group in compareGroups order with a ready
// member, or nil. None ready (a new apiserver starting, or stuck) is as if none served it all: the
// ready ones' documents, merged with the others' where they are held, beat a 503 for every resource
// of the group-version; only with nobody ready the key is unavailable.
func (d *decider) readyWholeGroup(byHash map[string]*group, cov *GVCoverage) *group {
	var eligible []*group
	for _, g := range byHash {
		e := g
		if cov != nil {
			e = &group{hash: g.hash, members: NewMembers(len(d.ups))}
			for i := range d.ups {
				if g.members.Has(i) && cov.All.Has(i) {
					e.add(i, &d.ups[i])
				}
			}
		}
		if e.size > 0 {
			eligible = append(eligible, e)
		}
	}
	slices.SortFunc(eligible, compareGroups)
	for _, g := range eligible {
		if g.ready {
			return g
		}
	}
	return nil
}

// merge decides a key nobody ready serves whole: ActionServe of the merged document of every
// group's (groups in compareGroups order), else its fallback (the route until the merge can be
// built, and Envoy's route when ext_proc is not there): the group serving the most of the
// group-version's resources, then the newest, ready ones first.
func (d *decider) merge(key string, groups []*group) Decision {
	fallback := slices.MinFunc(groups, compareFallback)
	degraded := Decision{Action: ActionRoute, Members: fallback.members, Hash: fallback.hash}
	if !fallback.ready {
		degraded = Decision{Action: ActionUnavailable, Hash: fallback.hash}
	}
	if len(groups) == 1 {
		// One document: a merge adds nothing to it (the upstreams serving the rest do not list K, e.g.
		// their index is not known yet), so its own upstreams serve it under its own hash.
		return degraded
	}
	if why := d.routeOnly(key, groups); why != "" {
		note(&d.res.Routed, key, why)
		return degraded
	}
	inputs := d.inputs(key, groups)
	if len(inputs) < len(groups) {
		note(&d.res.Degraded, key, fmt.Sprintf("%s %d of %d documents", Waiting, len(groups)-len(inputs), len(groups)))
		return degraded
	}
	merged, err := d.memo.Merge(key, inputs, d.now)
	if err != nil {
		note(&d.res.Degraded, key, err.Error())
		return degraded
	}
	if d.res.Merged == nil {
		d.res.Merged = map[string]*Spec{}
	}
	d.res.Merged[key] = merged
	return Decision{Action: ActionServe, Members: fallback.members, Hash: merged.Hash}
}

// inputs returns each group's document of key that some member holds, in the groups' order; for a
// group none holds, it asks every member that lacks it (Result.Wants) and leaves it out.
func (d *decider) inputs(key string, groups []*group) []*Spec {
	inputs := make([]*Spec, 0, len(groups))
	for _, g := range groups {
		if doc := d.heldDoc(key, g); doc != nil {
			inputs = append(inputs, doc)
			continue
		}
		for i := range d.ups {
			if g.members.Has(i) {
				if doc := d.ups[i].Docs[key]; doc == nil || doc.Hash != g.hash {
					if d.res.Wants == nil {
						d.res.Wants = map[string][]string{}
					}
					d.res.Wants[d.ups[i].Name] = append(d.res.Wants[d.ups[i].Name], key)
				}
			}
		}
	}
	return inputs
}

// heldDoc returns the document of key under the group's hash that some member holds, or nil.
func (d *decider) heldDoc(key string, g *group) *Spec {
	for i := range d.ups {
		if g.members.Has(i) {
			if doc := d.ups[i].Docs[key]; doc != nil && doc.Hash == g.hash {
				return doc
			}
		}
	}
	return nil
}

func note(m *map[string]string, key, why string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = why
}
