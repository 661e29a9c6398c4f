package xds

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// schemaPrefix is the path of the API schemas (/openapi/v2, /openapi/v3 and every document under
// it); extproc.SchemaPrefix, which TestSchemaRoutesMatchExtProc holds equal.
const schemaPrefix = "/openapi"

// schemaRoutes send the API schemas to the upstreams Topology.DecideSchemas names, as ext_proc does,
// so that failing open a client still reads the index and the documents it names from one group of
// apiservers. path_separated_prefix matches the prefix followed by the end of the path or a '/', on
// the path without its query (PathSeparatedPrefixRouteEntryImpl, source/common/router/
// config_impl.cc in a 2026 main copy; test/dataplane/CONFORMANCE.md row 30 has the releases),
// exactly what extproc's isSchemaPath tests. An upgrade takes the HTTP/1.1 twin,
// as ext_proc names it. Nothing when the decision is the default route.
//
// The exact /api and /apis routes match the path without its query like every exact path route
// (xds/openapiroutes.go says where Envoy does so).
func (tb *translator) schemaRoutes(retry *routev3.RetryPolicy) []*routev3.Route {
	if tb.top == nil {
		return nil
	}
	d := tb.top.DecideSchemas()
	if d.Action != discovery.ActionRoute {
		return nil
	}
	cluster := wire.SetCluster(d.Set.Members())
	match := func(extra ...*routev3.HeaderMatcher) *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: schemaPrefix}, Headers: extra}
	}
	upgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	notUpgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	discoveryRoute := func(path string) *routev3.Route {
		return &routev3.Route{Name: "discovery:" + path,
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: path}, Headers: []*routev3.HeaderMatcher{notUpgrade}},
			Action: &routev3.Route_Route{Route: skewAction(cluster, retry)}}
	}
	return []*routev3.Route{
		// Aggregated discovery (/api, /apis) failing open: ext_proc serves the merged documents; without
		// it, the documents of the same apiservers the schemas come from, so that a client (kubectl
		// explain) finds in discovery every resource whose schema it then reads, instead of one
		// apiserver's at random. With ext_proc up these routes are never taken: it names a cluster
		// for every discovery request.
		discoveryRoute("/api"),
		discoveryRoute("/apis"),
		{Name: "schemas:upgrade", Match: match(upgrade), Action: &routev3.Route_Route{Route: skewAction(wire.HTTP1Cluster(cluster), nil)}},
		{Name: "schemas", Match: match(), Action: &routev3.Route_Route{Route: skewAction(cluster, retry)}},
	}
}
