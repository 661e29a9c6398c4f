package xds

import (
	"fmt"
	"regexp/syntax"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/internal/wire"
)

// regexCost bounds from above the size of the RE2 program Envoy compiles for re (RE2::ProgramSize,
// which Envoy compares with re2.max_program_size.error_level), for the patterns skew routes use:
// ASCII literals and classes, optional and repeated groups, alternations. Each byte range costs one
// instruction; every repetition, option and alternative costs up to two more; a program has four of
// its own. TestRegexCostBoundsRE2 holds it above the sizes RE2 itself reported for every pattern of
// the goldens. A pattern it cannot parse costs more than any limit.
func regexCost(re string) int {
	t, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 1 << 30
	}
	return 4 + nodeCost(t.Simplify())
}

func nodeCost(n *syntax.Regexp) int {
	sum := func() int {
		c := 0
		for _, s := range n.Sub {
			c += nodeCost(s)
		}
		return c
	}
	switch n.Op {
	case syntax.OpLiteral:
		c := 0
		for _, r := range n.Rune {
			c += runeBytes(r)
			if n.Flags&syntax.FoldCase != 0 {
				c++
			}
		}
		return c
	case syntax.OpCharClass:
		c := 0
		for i := 0; i+1 < len(n.Rune); i += 2 {
			lo, hi := n.Rune[i], n.Rune[i+1]
			c += runeBytes(hi) // a range of multi-byte runes compiles to a sequence per length
			if lo < 0x80 && hi >= 0x80 {
				c += 8
			}
		}
		return c
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 12 // every UTF-8 length
	case syntax.OpConcat, syntax.OpCapture:
		return sum() + 2*btoi(n.Op == syntax.OpCapture)
	case syntax.OpAlternate:
		return sum() + 2*len(n.Sub)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return sum() + 2
	case syntax.OpRepeat:
		return sum()*max(n.Max, n.Min, 1) + 2*max(n.Max, n.Min, 1)
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 1
	}
	return 1 << 20
}

func runeBytes(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withAnonymousTwins puts before each skew route its anonymous twin, as routeConfig does for the
// other routes: same match plus "no Authorization, no verified client certificate", ext_proc told so
// through gRPC metadata, and the anonymous twin of an HTTP/2 cluster where that exists.
func withAnonymousTwins(routes []*routev3.Route, anon *anypb.Any) []*routev3.Route {
	absent := func(name string) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	}
	out := make([]*routev3.Route, 0, 2*len(routes))
	for _, r := range routes {
		a := proto.Clone(r).(*routev3.Route)
		a.Name = "anonymous-" + r.Name
		a.Match.Headers = append(a.Match.Headers, absent("authorization"), absent(wire.ForwardedCertHeader))
		a.TypedPerFilterConfig = map[string]*anypb.Any{filterExtProc: anon}
		if ra := a.GetRoute(); ra != nil {
			// Always the :anon twin: a missing twin fails the translation's route -> cluster check
			// instead of quietly sending requests without credentials over the front-proxy certificate.
			if c := ra.GetCluster(); !isHTTP1(c) {
				ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: wire.AnonCluster(c)}
			}
		}
		out = append(out, a, r)
	}
	return out
}

func isHTTP1(cluster string) bool {
	return len(cluster) > len(wire.HTTP1Suffix) && cluster[len(cluster)-len(wire.HTTP1Suffix):] == wire.HTTP1Suffix
}

// insertSkewRoutes puts the skew routes after the routes ext_proc's header selects and before the
// first other route (the upgrade and default routes).
func insertSkewRoutes(routes, skew []*routev3.Route) []*routev3.Route {
	i := slices.IndexFunc(routes, func(r *routev3.Route) bool { return r.GetRoute().GetClusterHeader() == "" })
	if i < 0 {
		i = len(routes)
	}
	return slices.Insert(routes, i, skew...)
}

// tableRoutes emits the decision table's rows as routes, in the table's order, each with its
// anonymous twin, for routeConfig; and the rows it cannot express, which ext_proc alone decides.
func (tb *translator) tableRoutes(retry *routev3.RetryPolicy, anon *anypb.Any) ([]*routev3.Route, []UnexpressedKey, error) {
	routes, unexpressed, err := tb.emitRows(retry)
	if err != nil {
		return nil, nil, err
	}
	return withAnonymousTwins(routes, anon), unexpressed, nil
}

// emitRows turns the rows into routes (without anonymous twins), keeping the table's order: Envoy
// takes the first route that matches, in configuration order, with no ranking by specificity
// (source/common/router/config_impl.cc: VirtualHostImpl::getRouteFromEntries loops over routes_ at
// envoyproxy/envoy commit 74fe3651, getRouteFromRoutes over them in a newer main copy; no release
// tag is stored). The rows of one resource key
// are emitted together (keyRoutes); the OpenAPI index row has no route (failing open the schemas row
// takes it, ext_proc serves it), and the last row is routeConfig's default routes.
func (tb *translator) emitRows(retry *routev3.RetryPolicy) ([]*routev3.Route, []UnexpressedKey, error) {
	if tb.top == nil {
		return nil, nil, nil
	}
	var out []*routev3.Route
	var unexpressed []UnexpressedKey
	openAPIRoutes := 0
	tab := tb.top.Table()
	rows := tab.Rows()
	for i := 0; i < len(rows); i++ {
		row := rows[i]
		switch row.Path {
		case decision.PathResource:
			for i+1 < len(rows) && rows[i+1].Path == decision.PathResource && rows[i+1].Key == row.Key {
				i++ // the key's verb rows: keyRoutes reads them all
			}
			rs, err := tb.keyRoutes(row.Key, retry)
			if err != nil {
				// ext_proc still decides it; failing open it takes the default routes, as before.
				unexpressed = append(unexpressed, UnexpressedKey{Key: row.Key, Reason: err.Error()})
				continue
			}
			out = append(out, rs...)
		case decision.PathOpenAPIDocument:
			r, err := openAPIRoute(tab, row, retry)
			if err == nil && r != nil && openAPIRoutes == maxOpenAPIRouteKeys {
				err = fmt.Errorf("more than %d OpenAPI document routes", maxOpenAPIRouteKeys)
			}
			if err != nil {
				unexpressed = append(unexpressed, UnexpressedKey{OpenAPI: row.Doc, Reason: err.Error()})
				continue
			}
			if r != nil {
				out = append(out, r)
				openAPIRoutes++
			}
		case decision.PathDiscovery:
			out = append(out, discoveryRoutes(tab, row, retry)...)
		case decision.PathSchemas:
			out = append(out, schemaRoutes(tab, row, retry)...)
		}
	}
	return out, unexpressed, nil
}
