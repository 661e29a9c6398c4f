package openapi

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the front never merges. kube-aggregator's OpenAPI v3 (pkg/controllers/openapiv3/aggregator,
// v0.35.4 and v0.36.3 alike) makes an apiserver's /openapi/v3 index the union of every APIService's
// own index: for an APIService that names a service (only those: controller.go's AddAPIService skips
// the others), the index its server answers, as user system:aggregator, every minute; the union
// takes every key of it, whatever group-version it names, with the hash the server wrote
// (getOpenAPIV3Root). A document request is proxied, per request and as the requesting user, to
// the APIService whose index lists the key (handleGroupVersion). So that server sees skewgate's
// fetches as skewgate's user and can answer them alone with a document no other client gets, and
// it chooses its hashes: one not of handler3's form (the SHA-512 of the bytes, upper-case hex)
// proves nothing about the bytes at all.
//
// A merged document is served to every client under its own hash, cached for a year, so the front
// merges a key only when every input is verified and no such server can answer for it:
//   - the key's group-version is no aggregated APIService's (Upstream.Aggregated);
//   - every hash the upstreams publish for it is of handler3's form, and the bytes fetched under it
//     hash to it (fetch.go): documents are shared between upstreams by key and hash only
//     then (store.go);
//   - every input describes only the key's paths and kinds (merge.go).
//
// Otherwise the key is routed to the apiservers the decision picks (the fallback of a merge), and
// the front's index names the hash they publish: what a client gets is what those apiservers serve
// it, as without skewgate.

// autoManagedLabel marks the APIServices an apiserver registers for itself: its built-in
// group-versions ("onstart") and CustomResourceDefinitions' ("true"), none of which names a service
// (kube-aggregator pkg/controllers/autoregister, AutoRegisterManagedLabel).
const autoManagedLabel = "kube-aggregator.kubernetes.io/automanaged"

// AggregatedAPIs returns the group-versions ("<group>/<version>", sorted) of the APIServices that
// may name a service. Only metadata is watched, so an APIService the apiserver did not register for
// itself (no autoManagedLabel) counts as one: at worst a key is routed that could be merged.
func AggregatedAPIs(apiServices []*metav1.PartialObjectMetadata) []string {
	var out []string
	for _, a := range apiServices {
		switch a.Labels[autoManagedLabel] {
		case "onstart", "true":
			continue
		}
		// An APIService's name is "<version>.<group>" (apiregistration validation).
		version, group, ok := strings.Cut(a.Name, ".")
		if !ok || version == "" || group == "" {
			continue
		}
		out = append(out, group+"/"+version)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AllAggregated, as the only entry of Upstream.Aggregated, stands for every group-version:
// the APIServices are not known yet (the informer has not synced), so nothing may be merged.
const AllAggregated = "*"

// aggregatedKeys returns the index keys of the group-versions any upstream puts behind an
// aggregated APIService.
func aggregatedKeys(ups []Upstream) map[string]bool {
	var out map[string]bool
	for _, u := range ups {
		for _, gv := range u.Aggregated {
			if out == nil {
				out = map[string]bool{}
			}
			if gv == AllAggregated {
				out[AllAggregated] = true
				continue
			}
			out["apis/"+gv] = true
		}
	}
	return out
}

// routeOnly says why key, which would need a merge, must not be merged (the front then never serves
// its own bytes for it), or "".
func (d *decider) routeOnly(key string, groups []*group) string {
	if d.aggregated[key] {
		return "an aggregated APIService serves it (its server can answer skewgate alone)"
	}
	if d.aggregated[AllAggregated] {
		return "the APIServices are not known yet: an aggregated one may serve it"
	}
	for _, g := range groups {
		if !IsSHA512Hex(g.hash) {
			return fmt.Sprintf("hash %.24q is not a SHA-512 the front can check", g.hash)
		}
	}
	return ""
}
