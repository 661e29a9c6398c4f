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
// config_impl.cc), exactly what extproc's isSchemaPath tests. An upgrade takes the HTTP/1.1 twin,
// as ext_proc names it. Nothing when the decision is the default route.
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
	return []*routev3.Route{
		{Name: "schemas:upgrade", Match: match(upgrade), Action: &routev3.Route_Route{Route: skewAction(wire.HTTP1Cluster(cluster), nil)}},
		{Name: "schemas", Match: match(), Action: &routev3.Route_Route{Route: skewAction(cluster, retry)}},
	}
}
