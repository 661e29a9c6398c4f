package discovery

import (
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// The API schemas (OpenAPI: /openapi/v2, /openapi/v3 and every document under it) describe what an
// apiserver serves, so during a skew each apiserver publishes a different set, and the v3 index of
// one names documents by hashes the others do not have. Until the front serves merged schemas, every
// schema request goes to one group of upstreams, the most capable: those that serve the most
// resource keys, and among them those of the newest version. In a skewed upgrade that is the new
// apiservers, which serve everything the old ones do and more; their schemas describe every
// resource of the merged discovery, and being of one version they publish the same hashes, so the
// index and the documents it names come from the same source.

// DecideSchemas returns where the front sends schema requests: ActionDefault when every upstream is
// in the most capable group (or none of that group is ready: a schema from any apiserver is better
// than none), else ActionRoute to that group.
func (t *Topology) DecideSchemas() Decision { return t.schemas }

// schemaSet returns the most capable group among the proven upstreams, and whether it is every one
// of them.
func schemaSet(ups []Upstream) (members []string, all bool) {
	best, bestVersion := -1, (*utilversion.Version)(nil)
	better := func(u Upstream, v *utilversion.Version) int {
		switch {
		case u.Resources != best:
			return u.Resources - best
		case v == nil && bestVersion == nil:
			return 0
		case v == nil:
			return -1
		case bestVersion == nil:
			return 1
		case v.LessThan(bestVersion):
			return -1
		case bestVersion.LessThan(v):
			return 1
		}
		return 0
	}
	for _, u := range ups {
		v, _ := utilversion.ParseGeneric(u.Version)
		switch c := better(u, v); {
		case c > 0:
			best, bestVersion, members = u.Resources, v, []string{u.Name}
		case c == 0:
			members = append(members, u.Name)
		}
	}
	return members, len(members) == len(ups)
}
