package xds

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/internal/wire"
)

// schemaRoutes send the API schemas to the set of the table's schemas row, as ext_proc does, so
// that failing open a client still reads the index and the documents it names from one group of
// apiservers. path_separated_prefix matches the prefix followed by the end of the path or a '/', on
// the path without its query (PathSeparatedPrefixRouteEntryImpl, source/common/router/
// config_impl.cc in a 2026 main copy; test/dataplane/CONFORMANCE.md row 30), exactly what
// decision.IsSchemaPath tests. An upgrade takes the HTTP/1.1 twin, as ext_proc names it. Nothing
// when the row decides the default route.
func schemaRoutes(tab *decision.Table, row decision.Row, retry *routev3.RetryPolicy) []*routev3.Route {
	if row.Action != decision.ActionRoute {
		return nil
	}
	cluster := tab.Cluster(row.Set)
	match := func(extra ...*routev3.HeaderMatcher) *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: decision.SchemaPrefix}, Headers: extra}
	}
	upgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	return []*routev3.Route{
		{Name: "schemas:upgrade", Match: match(upgrade), Action: &routev3.Route_Route{Route: skewAction(wire.HTTP1Cluster(cluster), nil)}},
		{Name: "schemas", Match: match(), Action: &routev3.Route_Route{Route: skewAction(cluster, retry)}},
	}
}

// discoveryRoutes are the discovery row's routes: aggregated discovery (/api, /apis) failing open.
// ext_proc serves the merged documents; without it, the documents of the set the row names (the
// apiservers the schemas come from), so that a client (kubectl explain) finds in discovery every
// resource whose schema it then reads, instead of one apiserver's at random. With ext_proc up these
// routes are never taken: it names a cluster for every discovery request. The exact paths match the
// path without its query like every exact path route (openapiroutes.go says where Envoy does so).
func discoveryRoutes(tab *decision.Table, row decision.Row, retry *routev3.RetryPolicy) []*routev3.Route {
	if row.Set == "" {
		return nil
	}
	cluster := tab.Cluster(row.Set)
	notUpgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	var out []*routev3.Route
	for _, path := range []string{"/api", "/apis"} {
		out = append(out, &routev3.Route{Name: "discovery:" + path,
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: path}, Headers: []*routev3.HeaderMatcher{notUpgrade}},
			Action: &routev3.Route_Route{Route: skewAction(cluster, retry)}})
	}
	return out
}
