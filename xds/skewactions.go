package xds

import (
	"encoding/json"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// The routes of one method group of one skew route shape (skewroutes.go).

// routeName names a skew route: skew:<g>/<v>/<resource>[/<sub>]:<shape>:<verb>[:<variant>].
func routeName(k discovery.ResourceKey, shape skewShape, verb, variant string) string {
	n := "skew:" + k.Group + "/" + k.Version + "/" + k.Resource
	if k.Subresource != "" {
		n += "/" + k.Subresource
	}
	n += ":" + [...]string{"all", "watch", "named", "collection"}[shape]
	if verb != "" {
		n += ":" + verb
	}
	if variant != "" {
		n += ":" + variant
	}
	return n
}

// groupRoutes returns the routes of one method group of one shape: for a cluster, an upgrade route
// (HTTP/1.1 twin) and one for every other request (retried where it provably never reached an
// apiserver, as the default routes are); for unavailable, a direct 503.
func (tb *translator) groupRoutes(k discovery.ResourceKey, shape skewShape, prefix, re string, g methodGroup, retry *routev3.RetryPolicy) ([]*routev3.Route, error) {
	pathPrefix := &routev3.HeaderMatcher{Name: ":path", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix},
	}}}
	match := func(extra ...*routev3.HeaderMatcher) *routev3.RouteMatch {
		hs := []*routev3.HeaderMatcher{pathPrefix}
		if g.methods != nil {
			hs = append(hs, methodMatcher(g.methods))
		}
		hs = append(hs, extra...)
		m := &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}},
			Headers:       hs,
		}
		if g.query != nil {
			m.QueryParameters = []*routev3.QueryParameterMatcher{g.query}
		}
		return m
	}
	verb := g.verb
	switch {
	case g.methods == nil && verb == "" && shape != shapeAll:
		verb = "other"
	case g.query == watchOff:
		verb = "list-param"
	case g.query == watchOn:
		verb = "watch-param"
	}
	switch g.decision.Action {
	case discovery.ActionUnavailable:
		body, err := unavailableBody(k)
		if err != nil {
			return nil, err
		}
		return []*routev3.Route{{
			Name:  routeName(k, shape, verb, "unavailable"),
			Match: match(),
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
				Status: 503,
				Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: body}},
			}},
			// Applied to direct responses too (router.cc: the direct response's
			// finalizeResponseHeaders, in a 2026 main copy: test/dataplane/CONFORMANCE.md row 32),
			// before the local reply sets a content type only where none is.
			ResponseHeadersToAdd: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "content-type", Value: "application/json"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &corev3.HeaderValue{Key: "retry-after", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			},
		}}, nil
	}
	cluster := wire.AllCluster
	if g.decision.Action == discovery.ActionRoute {
		cluster = tb.top.Table().Cluster(g.decision.Set) // named once per table
	}
	upgrade := &routev3.HeaderMatcher{Name: "upgrade", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	rs := []*routev3.Route{{
		Name:   routeName(k, shape, verb, "upgrade"),
		Match:  match(upgrade),
		Action: &routev3.Route_Route{Route: skewAction(wire.HTTP1Cluster(cluster), nil)},
	}}
	rs = append(rs, &routev3.Route{
		Name:   routeName(k, shape, verb, ""),
		Match:  match(),
		Action: &routev3.Route_Route{Route: skewAction(cluster, retry)},
	})
	return rs, nil
}

// skewAction sends to a cluster with no route timeout (watches and exec streams live as long as the
// apiserver keeps them), retried as the default routes are.
func skewAction(cluster string, retry *routev3.RetryPolicy) *routev3.RouteAction {
	return &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}, Timeout: durationpb.New(0), RetryPolicy: retry}
}

func methodRegex(re string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}},
	}}}
}

func methodMatcher(methods []string) *routev3.HeaderMatcher {
	if len(methods) == 1 {
		return &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: methods[0]},
		}}}
	}
	return methodRegex(strings.Join(methods, "|"))
}

// unavailableBody is the metav1.Status ext_proc answers for the same decision.
func unavailableBody(k discovery.ResourceKey) (string, error) {
	b, err := json.Marshal(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf("no apiserver that serves %s is available, retry later", k.String()),
		Reason:   metav1.StatusReasonServiceUnavailable,
		Code:     503,
	})
	return string(b), err
}
