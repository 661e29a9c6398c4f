package xds

import (
	"fmt"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/openapi"
)

// OpenAPI v3 routes: Envoy's route table carries the decision table's OpenAPI document rows
// (decision.PathOpenAPIDocument), so that while ext_proc is down, hung or restarting a client that read
// an index still gets each document from apiservers that publish it under one hash, and one that
// followed a 301 reaches that group again:
//
//   - ActionRoute: /openapi/v3/<key> to the cluster of the decision's set, as ext_proc routes it;
//   - ActionServe: to the decision's set, the fallback ext_proc also sends the request to (its own
//     document, under its own hash: one apiserver's view instead of the merged one, but consistent);
//   - ActionUnavailable and ActionDefault: no route; the schema routes and the default route decide.
//
// The match is the exact path (RouteMatch.path), which Envoy compares with the path without its query
// and fragment: PathRouteEntryImpl::matches calls path_matcher_->match(
// sanitizePathBeforePathMatching(path)) (source/common/router/config_impl.cc; sanitize only drops
// ";" path parameters, and only with ignore_path_parameters_in_path_matching, which skewgate does not
// set), and Matchers::PathMatcher::match compares Http::PathUtil::removeQueryAndFragment(path)
// (source/common/common/matchers.cc). Read in a main copy of late 2026 and at envoyproxy/envoy
// commit 74fe3651 (a 1.2x-era copy), identical here; no copy at a release tag could be read, the
// 1.37.0-1.40.0 changelogs change only what ignore_path_parameters_in_path_matching strips
// (CVE-2026-73511: the parameters of each segment), and every older copy of config_impl.cc, back to the 1.x releases that compared
// the path up to its '?' by hand, ignores the query the same way (test/dataplane/CONFORMANCE.md,
// row 30). So /openapi/v3/<key>?hash=<any> takes the route.
//
// The routes refuse upgrades (an upgrade takes the schema or default upgrade route, HTTP/1.1) and
// come with anonymous twins like every skew route. They sit after the resource skew routes and
// before the /openapi prefix schema routes, which they refine.
//
// Bounded: an index has at most openapi.MaxKeys keys (openapi.ParseIndex); maxOpenAPIRouteKeys caps
// the keys here whatever the inputs, so the table gains at most 2 × maxOpenAPIRouteKeys routes. A
// key past the cap, or one whose path an exact match cannot meet, is an unexpressed key: ext_proc
// alone decides it, and failing open it takes the schema routes.
const maxOpenAPIRouteKeys = openapi.MaxKeys

// openAPIRoute is the exact-path route of one OpenAPI v3 document row (without its anonymous twin),
// nil for a row that needs none; an error says why a row that needs one cannot have it.
func openAPIRoute(tab *decision.Table, row decision.Row, retry *routev3.RetryPolicy) (*routev3.Route, error) {
	if row.Action != decision.ActionRoute && row.Action != decision.ActionServe {
		return nil, nil
	}
	if !routableOpenAPIKey(row.Doc) {
		return nil, fmt.Errorf("key %q is not a path Envoy's normalization leaves as it is", row.Doc)
	}
	notUpgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	return &routev3.Route{
		Name: "openapi:" + row.Doc,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Path{Path: decision.OpenAPIV3Path + "/" + row.Doc},
			Headers:       []*routev3.HeaderMatcher{notUpgrade},
		},
		Action: &routev3.Route_Route{Route: skewAction(tab.Cluster(row.Set), retry)},
	}, nil
}

// routableOpenAPIKey says whether the path of key is one Envoy's path normalization leaves as it is
// (normalize_path, merge_slashes), so that an exact match can meet it: segments of unreserved
// characters, none empty, none a dot segment. Anything else is left to ext_proc, which treats a path
// with an escape as no OpenAPI key either (decision.OpenAPIPath).
func routableOpenAPIKey(key string) bool {
	if key == "" {
		return false
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			if !unreservedByte(seg[i]) {
				return false
			}
		}
	}
	return true
}
