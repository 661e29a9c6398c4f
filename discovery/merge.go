package discovery

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilsort "k8s.io/apimachinery/pkg/util/sort"
)

// mergedDocument merges upstream documents (given in upstream-name order, nil for unknown) with the
// rules of the in-tree peer-aggregated discovery (k8s.io/apiserver
// pkg/endpoints/discovery/aggregated/peer_aggregated_handler.go): servers in lexicographic order;
// groups, versions and resources unioned keeping every server's relative order
// (utilsort.MergePreservingRelativeOrder); verbs and subresources of a resource unioned and sorted.
// Identical documents (same hash) are merged once: the union is idempotent.
func mergedDocument(docs []*Document) MergedDiscovery {
	seen := map[string]bool{}
	var distinct [][]apidiscoveryv2.APIGroupDiscovery
	for _, d := range docs {
		if d == nil || (d.Hash != "" && seen[d.Hash]) {
			continue // a document without a hash is its own
		}
		seen[d.Hash] = true
		distinct = append(distinct, d.Groups)
	}
	list := apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    mergeGroups(distinct),
	}
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	data, err := json.Marshal(list)
	if err != nil {
		// Every field is a plain string, slice or struct: Marshal cannot fail.
		panic(fmt.Sprintf("discovery: marshal merged document: %v", err))
	}
	return MergedDiscovery{List: list, JSON: data, ETag: fmt.Sprintf("%X", sha512.Sum512(data))}
}

func mergeGroups(servers [][]apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery {
	if len(servers) == 1 {
		return servers[0]
	}
	byName := map[string]apidiscoveryv2.APIGroupDiscovery{}
	var orders [][]string
	for _, groups := range servers {
		order := make([]string, 0, len(groups))
		for _, g := range groups {
			if prev, ok := byName[g.Name]; ok {
				// Upstreams of neighbouring versions list most groups alike: merging a group with
				// itself changes nothing (as a group only one upstream lists, it stays as listed).
				if !reflect.DeepEqual(prev, g) {
					byName[g.Name] = mergeVersions(prev, g)
				}
			} else {
				byName[g.Name] = g
			}
			order = append(order, g.Name)
		}
		orders = append(orders, order)
	}
	var out []apidiscoveryv2.APIGroupDiscovery
	for _, name := range dedupe(utilsort.MergePreservingRelativeOrder(orders)) {
		out = append(out, byName[name])
	}
	return out
}

func mergeVersions(a, b apidiscoveryv2.APIGroupDiscovery) apidiscoveryv2.APIGroupDiscovery {
	byVersion := map[string]apidiscoveryv2.APIVersionDiscovery{}
	orders := [][]string{nil, nil}
	for _, v := range a.Versions {
		byVersion[v.Version] = v
		orders[0] = append(orders[0], v.Version)
	}
	for _, v := range b.Versions {
		if prev, ok := byVersion[v.Version]; ok {
			byVersion[v.Version] = mergeResources(prev, v)
		} else {
			byVersion[v.Version] = v
		}
		orders[1] = append(orders[1], v.Version)
	}
	out := apidiscoveryv2.APIGroupDiscovery{TypeMeta: a.TypeMeta, ObjectMeta: *a.ObjectMeta.DeepCopy()}
	for _, name := range dedupe(utilsort.MergePreservingRelativeOrder(orders)) {
		out.Versions = append(out.Versions, byVersion[name])
	}
	return out
}

func mergeResources(a, b apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIVersionDiscovery {
	byName := map[string]apidiscoveryv2.APIResourceDiscovery{}
	orders := [][]string{nil, nil}
	for _, r := range a.Resources {
		byName[r.Resource] = r
		orders[0] = append(orders[0], r.Resource)
	}
	for _, r := range b.Resources {
		if prev, ok := byName[r.Resource]; ok {
			if !reflect.DeepEqual(prev, r) {
				byName[r.Resource] = mergeCapabilities(prev, r)
			}
		} else {
			byName[r.Resource] = r
		}
		orders[1] = append(orders[1], r.Resource)
	}
	out := apidiscoveryv2.APIVersionDiscovery{Version: a.Version, Freshness: a.Freshness}
	for _, name := range dedupe(utilsort.MergePreservingRelativeOrder(orders)) {
		out.Resources = append(out.Resources, byName[name])
	}
	return out
}

// mergeCapabilities unions verbs and subresources; a's other fields win (in-tree:
// mergeResourceCapabilities).
func mergeCapabilities(a, b apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	out := a
	if out.Resource == "" {
		out = b
	}
	out.Verbs = nil
	if verbs := slices.Concat(a.Verbs, b.Verbs); len(verbs) > 0 {
		slices.Sort(verbs)
		out.Verbs = slices.Compact(verbs)
	}
	subs := map[string]apidiscoveryv2.APISubresourceDiscovery{}
	for _, s := range a.Subresources {
		subs[s.Subresource] = s
	}
	for _, s := range b.Subresources {
		subs[s.Subresource] = s
	}
	out.Subresources = nil
	for _, name := range slices.Sorted(maps.Keys(subs)) {
		out.Subresources = append(out.Subresources, subs[name])
	}
	return out
}

// dedupe drops repeated names; MergePreservingRelativeOrder already returns each once, this only
// guards against a hostile document that lists a name twice.
func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
