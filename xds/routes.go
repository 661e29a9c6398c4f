package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// routeConfig is the route table: the base routes around the decision table's rows (skewtable.go).
// Envoy takes the first route that matches:
//
//  1. ext_proc named a cluster (wire.RouteHeader, its value a full match of
//     wire.RoutedClusterPattern): go there. An unknown name answers 503 (cluster_not_found_response_code;
//     router.cc answers it with flag NC, whatever the cluster_header proto comment says; at v1.35.0,
//     v1.36.0 and 2026 main, test/dataplane/CONFORMANCE.md row 4), never a
//     wrong 404 from an apiserver that lacks the resource. The gRPC clusters never match the pattern,
//     so no header value reaches skewgate itself.
//  2. the decision table's rows, in order (resource shapes, OpenAPI documents, discovery, schemas).
//  3. an upgrade (exec, attach, port-forward) without a routing header: every upstream, HTTP/1.1.
//  4. everything else: every upstream (the anonymous twin for requests without credentials).
//
// Requests are retried (on another apiserver where there is one) only where they provably never
// reached an apiserver: a connection that failed, or an HTTP/2 stream the apiserver refused
// (REFUSED_STREAM, also every stream past the last one a GOAWAY accepted, as an apiserver that shuts
// down sends). That holds for writes too, so every method is retried; Envoy buffers the request body
// for it up to the decoder buffer limit and gives up on the retry past it (Filter::decodeData,
// source/common/router/router.cc at 001b1c0c; RetryStateImpl::wouldRetryFromReset,
// retry_state_impl.cc at v1.35.0, v1.36.0 and 2026 main: test/dataplane/CONFORMANCE.md rows 20, 20a). The
// upgrade routes have no retry policy; an upgrade ext_proc routes by header takes the routed route,
// whose retries are as safe for it (the router holds the upgrade's payload until the 101).
//
// The route is selected (and cluster_header read) by the connection manager before any HTTP filter
// runs, and again only when a filter clears the route cache (ext_proc does, when its answer mutates
// headers; its fail-open paths do not). A client's own x-skewgate-cluster is therefore removed before
// the first selection: internal_only_headers are removed from every request that is not internal
// (conn_manager_utility.cc, mutateRequestHeaders, cleanInternalHeaders, at v1.35.0, v1.36.0 and
// 2026 main: test/dataplane/CONFORMANCE.md row 21), and listener.go makes no
// peer internal.
func (tb *translator) routeConfig() (*routev3.RouteConfiguration, []UnexpressedKey, error) {
	retry, err := retryPolicy()
	if err != nil {
		return nil, nil, err
	}
	anon, err := anonymousOverride()
	if err != nil {
		return nil, nil, err
	}
	rows, unexpressed, err := tb.tableRoutes(retry, anon)
	if err != nil {
		return nil, nil, err
	}
	routes := insertSkewRoutes(withAnonymousBaseTwins(baseRoutes(retry), anon), rows)
	return routeConfiguration(routes), unexpressed, nil
}

// baseRoute is a route of the base table, with the cluster of its anonymous twin where it differs.
type baseRoute struct {
	r         *routev3.Route
	anonAlias string
}

// baseRoutes are the routes every table has: the routing header, upgrades, the default.
func baseRoutes(retry *routev3.RetryPolicy) []baseRoute {
	// A safe_regex string match is a full match (source/common/common/regex.h,
	// CompiledGoogleReMatcher::match calls re2::RE2::FullMatch, in the main copies read). At every
	// supported release RE2 runs in Latin-1 mode (CVE-2026-73552, changelogs/1.37.6.yaml ..
	// 1.40.0.yaml), which changes nothing for this ASCII pattern on ASCII names.
	routed := &routev3.HeaderMatcher{Name: wire.RouteHeader, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: wire.RoutedClusterPattern}},
	}}}
	upgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	byHeader := &routev3.RouteAction{
		ClusterSpecifier:            &routev3.RouteAction_ClusterHeader{ClusterHeader: wire.RouteHeader},
		ClusterNotFoundResponseCode: routev3.RouteAction_SERVICE_UNAVAILABLE,
	}
	return []baseRoute{
		{r: prefixRoute("routed", []*routev3.HeaderMatcher{routed}, byHeader, retry)},
		// Upgrades have no anonymous twin cluster: without credentials they ride HTTP/1.1 with no
		// identity header, and the apiserver refuses them.
		{r: prefixRoute("upgrade", []*routev3.HeaderMatcher{upgrade}, toCluster(wire.HTTP1Cluster(wire.AllCluster)), nil)},
		{r: prefixRoute("default", nil, toCluster(wire.AllCluster), retry), anonAlias: wire.AnonCluster(wire.AllCluster)},
	}
}

// prefixRoute is a route for every path with headers, with no route timeout: watches and exec
// streams live for as long as the apiserver keeps them.
func prefixRoute(name string, headers []*routev3.HeaderMatcher, action *routev3.RouteAction, retry *routev3.RetryPolicy) *routev3.Route {
	action.Timeout = durationpb.New(0)
	action.RetryPolicy = retry
	return &routev3.Route{
		Name:   name,
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: headers},
		Action: &routev3.Route_Route{Route: action},
	}
}

func toCluster(c string) *routev3.RouteAction {
	return &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}
}

// anonymousOverride is the per-route ext_proc config of every anonymous twin. Each route has an
// anonymous twin first: a request with no Authorization header and no verified client certificate
// (X-Forwarded-Client-Cert is set by the connection manager before routing and cannot be forged:
// SANITIZE_SET) tells ext_proc so through gRPC metadata. The route is chosen from the request as it
// arrived, before any filter runs.
func anonymousOverride() (*anypb.Any, error) {
	return envoyconf.Pack(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{
		GrpcInitialMetadata: []*corev3.HeaderValue{{Key: wire.CredentialsMetadata, Value: wire.CredentialsNone}},
	}}})
}

// withAnonymousBaseTwins puts before each base route its anonymous twin.
func withAnonymousBaseTwins(base []baseRoute, anon *anypb.Any) []*routev3.Route {
	absent := func(name string) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	}
	routes := make([]*routev3.Route, 0, 2*len(base))
	for _, b := range base {
		a := proto.Clone(b.r).(*routev3.Route)
		a.Name = "anonymous-" + b.r.Name
		a.Match.Headers = append(a.Match.Headers, absent("authorization"), absent(wire.ForwardedCertHeader))
		a.TypedPerFilterConfig = map[string]*anypb.Any{filterExtProc: anon}
		if b.anonAlias != "" {
			a.GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: b.anonAlias}
		}
		routes = append(routes, a, b.r)
	}
	return routes
}

// routeConfiguration is the route table of routes.
func routeConfiguration(routes []*routev3.Route) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name:         wire.RouteConfigName,
		VirtualHosts: []*routev3.VirtualHost{{Name: "apiservers", Domains: []string{"*"}, Routes: routes}},
		// Removed by the connection manager from every non-internal request before route selection.
		InternalOnlyHeaders: []string{wire.RouteHeader},
		// The client certificate ext_proc read (set by the connection manager, SANITIZE_SET) never
		// reaches an apiserver: the router removes it when it forwards (source/common/router/router.cc
		// calls the route entry's finalizeRequestHeaders, which applies the route configuration's
		// request_headers_to_remove, config_impl.cc; a cluster_header route's DelegatingRouteEntry
		// delegates it, delegating_route_impl.cc; in 2026 main copies, test/dataplane/CONFORMANCE.md
		// row 23). Unlike a header_mutation filter after ext_proc, this
		// needs no route lookup by a later filter.
		// The identity filter's refusal marker never reaches one either (a marked request is answered
		// by ext_proc or the Lua filter after it; this covers a failing script).
		RequestHeadersToRemove: []string{wire.ForwardedCertHeader, wire.IdentityRefusedHeader},
		ValidateClusters:       wrapperspb.Bool(false), // clusters named by header are checked per request
	}
}

func retryPolicy() (*routev3.RetryPolicy, error) {
	prev, err := envoyconf.Pack(&previoushostsv3.PreviousHostsPredicate{})
	if err != nil {
		return nil, err
	}
	return &routev3.RetryPolicy{
		RetryOn:    "connect-failure,refused-stream",
		NumRetries: wrapperspb.UInt32(2),
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: prev},
		}},
		HostSelectionRetryMaxAttempts: 3,
	}, nil
}
