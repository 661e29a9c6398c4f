package equivalence

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/xds"
)

// xdsTestdata is xds's translation cases: the OpenAPI guard runs on the very Topologies whose route
// tables xds's golden files and tests record.
var xdsTestdata = filepath.Join("..", "..", "xds", "testdata")

// TestOpenAPIRoutesMatchTable holds the route table's OpenAPI routes (what a request keeps when
// ext_proc fails open, as the test data plane's route matcher picks it) to the decision table's
// answer (what ext_proc answers) for every decided key, method and query, with and without
// credentials: the same cluster. The exceptions are by design: an unavailable key is answered 503
// by ext_proc and has no OpenAPI route (the schema routes take it), and an upgrade is left to the
// upgrade routes.
func TestOpenAPIRoutesMatchTable(t *testing.T) {
	compared := map[discovery.Action]int{}
	compareOpenAPIRoutes(t, "openapi-skewed", xdstest.Scenario(t, filepath.Join(xdsTestdata, "openapi-skewed.in.yaml")), compared)
	compareOpenAPIRoutes(t, "served", xdstest.Served(t, xdsTestdata), compared)
	for _, a := range []discovery.Action{discovery.ActionRoute, discovery.ActionServe, discovery.ActionUnavailable, discovery.ActionDefault} {
		if compared[a] == 0 {
			t.Errorf("compared %v: no key decided %v", compared, a)
		}
	}
}

func compareOpenAPIRoutes(t *testing.T, name string, top *discovery.Topology, compared map[discovery.Action]int) {
	rs, err := xds.Translate(top, options())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	f := &fixture{top: top, table: rs.Routes[0]}
	keys := []string{"api/v1", "version", "apis/late.example/v1", "apis/unknown.example/v1"}
	for _, d := range top.OpenAPIDecisions() {
		keys = append(keys, d.Key)
	}
	for _, key := range keys {
		action := top.DecideOpenAPI(key).Action
		for _, method := range []string{"GET", "HEAD", "POST"} {
			for _, query := range []string{"", "?hash=" + top.DecideOpenAPI(key).Hash, "?hash=ABC&x=y"} {
				for _, anonymous := range []bool{false, true} {
					r := request{method: method, path: decision.OpenAPIV3Path + "/" + key + query, anonymous: anonymous}
					got, want := f.failOpen(t, r, r.path), f.decided(t, r, r.path)
					what := name + ": " + method + " " + r.path
					if anonymous {
						what += " (anonymous)"
					}
					isOpenAPIRoute := strings.Contains(got.route, "openapi:") // anonymous-openapi: too
					switch {
					case action == discovery.ActionUnavailable:
						if want.status != http.StatusServiceUnavailable || isOpenAPIRoute {
							t.Errorf("%s: the decision table answers %v, the route table takes route %s", what, want, got.route)
						}
					case want.status != 0:
						t.Errorf("%s: the decision table answers %d", what, want.status)
					case action == discovery.ActionDefault:
						// Both send it where every schema request goes.
						if isOpenAPIRoute || got.cluster != want.cluster {
							t.Errorf("%s: default key: route table %s -> %v, decision table -> %v", what, got.route, got, want)
						}
					default:
						if got.cluster != want.cluster || !isOpenAPIRoute {
							t.Errorf("%s: route table %s -> %v, decision table -> %v", what, got.route, got, want)
						}
					}
					compared[action]++
				}
			}
		}
	}
	// An upgrade never takes an OpenAPI route: it needs an HTTP/1.1 cluster.
	h := http.Header{"Authorization": {"Bearer token"}, "Upgrade": {"websocket"}}
	if rt := dataplane.SelectRoute(f.table, "GET", decision.OpenAPIV3Path+"/apis/apps/v1", h); strings.Contains(rt.GetName(), "openapi:") || !strings.HasSuffix(rt.GetRoute().GetCluster(), wire.HTTP1Suffix) {
		t.Errorf("%s: upgrade: route %s -> %s", name, rt.GetName(), rt.GetRoute().GetCluster())
	}
}
