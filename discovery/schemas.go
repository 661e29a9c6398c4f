package discovery

import (
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/skewgate/skewgate/internal/kubeversion"
)

// The API schemas (OpenAPI: /openapi/v2, /openapi/v3 and every document under it) describe what an
// apiserver serves, so during a skew each apiserver publishes a different set, and the v3 index of
// one names documents by hashes the others do not have. The v3 documents are decided one by one
// (openapi/decision.go) and the front serves its own v3 index; every other schema request (/openapi/v2, a v3
// key no decision names) goes to one group of upstreams, the most capable, and so do, failing open,
// /openapi/v3 and discovery (/api, /apis) in Envoy's route table:
//
//   - the upstreams that serve every resource of the merged discovery, the newest version among them.
//     In an upgrade that adds APIs that is the new apiservers: their schemas describe every resource
//     a client can find, and being of one version they publish the same hashes, so the index and the
//     documents it names come from one source;
//   - when none serves everything (the new version removed an API the old one still serves), the
//     newest version: the schemas of the APIs a client is upgrading to, and the ones of the removed
//     API are missing from the front's schemas.

// DecideSchemas returns where the front sends schema requests: ActionDefault when every upstream is
// in the chosen group (or none of that group is ready: a schema from any apiserver is better than
// none), else ActionRoute to that group.
func (t *Topology) DecideSchemas() Decision { return t.Table().Schemas() }

// schemaSet returns the chosen group among the proven upstreams (keys is the number of resource keys
// of the merged discovery), and whether it is every one of them.
func schemaSet(ups []Upstream, keys int) (members []string, all bool) {
	var full []Upstream
	for _, u := range ups {
		if u.Resources == keys {
			full = append(full, u)
		}
	}
	if len(full) == 0 {
		full = ups
	}
	members = newest(full)
	return members, len(members) == len(ups)
}

// newest returns the names of the upstreams of the highest version; an unparsable version is the
// lowest (kubeversion.NewerFirst).
func newest(ups []Upstream) []string {
	var best *utilversion.Version
	var out []string
	for _, u := range ups {
		v, _ := utilversion.ParseGeneric(u.Version)
		switch c := kubeversion.NewerFirst(v, best); {
		case len(out) == 0 || c < 0:
			best, out = v, []string{u.Name}
		case c == 0:
			out = append(out, u.Name)
		}
	}
	return out
}
