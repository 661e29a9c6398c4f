package dataplane

import (
	"net/http"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Route matchers beyond the plain prefix, as Envoy's router has them (source/common/router/
// config_impl.cc, config_utility.cc, source/common/common/matchers.cc, source/common/http/
// utility.cc; the same at v1.35.0, v1.36.0 and v1.37).

// pathOnly is Http::PathUtil::removeQueryAndFragment: the path up to the first '?' or '#'.
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// matchPathSpecifier reports whether a route's path specifier other than prefix accepts the path
// (with its query). Every path matcher compares the path without query and fragment
// (Matchers::PathMatcher::match). known is false for matchers this data plane does not implement:
// those never match.
func matchPathSpecifier(m *routev3.RouteMatch, path string) (matched, known bool) {
	p := pathOnly(path)
	switch s := m.PathSpecifier.(type) {
	case *routev3.RouteMatch_Path:
		// RouteMatch.path: the whole path, case sensitive unless case_sensitive is false.
		if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
			return strings.EqualFold(p, s.Path), true
		}
		return p == s.Path, true
	case *routev3.RouteMatch_SafeRegex:
		// RE2 full match (CompiledGoogleReMatcher::match uses RE2::FullMatch); Go's regexp is RE2.
		return fullMatch(s.SafeRegex.GetRegex(), p), true
	case *routev3.RouteMatch_PathSeparatedPrefix:
		// The prefix, then the end of the path or a '/' (PathSeparatedPrefixRouteEntryImpl).
		pre := s.PathSeparatedPrefix
		if len(p) < len(pre) || !(p[:len(pre)] == pre || !m.GetCaseSensitive().GetValue() && m.GetCaseSensitive() != nil && strings.EqualFold(p[:len(pre)], pre)) {
			return false, true
		}
		return len(p) == len(pre) || p[len(pre)] == '/', true
	}
	return false, false
}

// matchString is Matchers::StringMatcherImpl for the patterns skewgate emits; ok is false for an
// unimplemented one (which then never matches).
func matchString(sm *matcherv3.StringMatcher, v string) (matched, ok bool) {
	fold := func(s string) string {
		if sm.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact), true
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix)), true
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix)), true
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains)), true
	case *matcherv3.StringMatcher_SafeRegex:
		return fullMatch(p.SafeRegex.GetRegex(), v), true
	}
	return false, false
}

// matchQueryParameters is ConfigUtility::matchQueryParams: every matcher must accept the first
// value of its parameter; a missing parameter does not match (a present_match never appears in
// skewgate's config: its meaning changed with a runtime guard).
func matchQueryParameters(ms []*routev3.QueryParameterMatcher, path string) bool {
	if len(ms) == 0 {
		return true
	}
	params := parseAndDecodeQuery(path)
	for _, m := range ms {
		v, ok := params[m.Name]
		if !ok {
			return false
		}
		sm := m.GetStringMatch()
		if sm == nil {
			return false
		}
		if matched, known := matchString(sm, v); !matched || !known {
			return false
		}
	}
	return true
}

// parseAndDecodeQuery is what the route matcher reads of the query, keeping first values: after the
// first '?', pairs split on '&', name and value on the first '=', NOT percent-decoded: the router
// parses with Utility::QueryParamsMulti::parseQueryString, which does not decode
// (RouteEntryImplBase::matchRoute, source/common/router/config_impl.cc), so "w%61tch=1" is no
// "watch" parameter to Envoy although the apiserver decodes it.
func parseAndDecodeQuery(path string) map[string]string {
	start := strings.IndexByte(path, '?')
	if start < 0 {
		return nil
	}
	out := map[string]string{}
	for start++; start < len(path); {
		end := strings.IndexByte(path[start:], '&')
		if end < 0 {
			end = len(path)
		} else {
			end += start
		}
		name, value, _ := strings.Cut(path[start:end], "=")
		if _, dup := out[name]; !dup {
			out[name] = value
		}
		start = end + 1
	}
	return out
}

// directResponse answers from a route's direct_response (router.cc: sendLocalReply with the status
// and body, then the route's response_headers_to_add; the local reply sets content-type text/plain
// only when no header set one, and sends no body to HEAD; Utility::prepareLocalReply).
func directResponse(w http.ResponseWriter, r *http.Request, route *routev3.Route) {
	dr := route.GetDirectResponse()
	body := dr.GetBody().GetInlineString()
	if body == "" {
		body = string(dr.GetBody().GetInlineBytes())
	}
	for _, o := range route.GetResponseHeadersToAdd() {
		setHeader(w.Header(), o.Header.Key, o.Header.Value, o.AppendAction)
	}
	if body != "" && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/plain")
	}
	w.WriteHeader(int(dr.GetStatus()))
	if r.Method != http.MethodHead {
		w.Write([]byte(body))
	}
}

// SelectRoute is the route Envoy's router table picks for a request that arrived with method, path
// (and query) and headers, after the connection manager's path normalization as skewgate configures
// it (normalize_path, merge_slashes, escaped slashes kept), before any filter ran: the route a
// request keeps when ext_proc fails open. For tests that compare the route table with other
// deciders. A path the connection manager refuses (400, see NormalizeRequestPath) has no route.
// Repeated headers are matched as DefaultEnvoyVersion matches them (route.go, requestView.perValue).
func SelectRoute(rc *routev3.RouteConfiguration, method, path string, header http.Header) *routev3.Route {
	p, ok := NormalizeRequestPath(path)
	if !ok {
		return nil
	}
	if header == nil {
		header = http.Header{}
	}
	view := &requestView{method: method, path: p, authority: "front", scheme: "https", header: header,
		perValue: matchHeadersIndividually(DefaultEnvoyVersion)}
	if e := matchRoute(rc, view); e != nil {
		return e.route
	}
	return nil
}

// skewgateHCM is the part of skewgate's connection manager config that path normalization reads.
var skewgateHCM = &hcmv3.HttpConnectionManager{NormalizePath: wrapperspb.Bool(true), MergeSlashes: true,
	PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_KEEP_UNCHANGED}

// NormalizeRequestPath is the :path the connection manager routes, hands to filters and forwards
// (query kept), with normalize_path and merge_slashes as skewgate sets them; ok is false when Envoy
// answers 400 instead (a fragment, an escaped NUL).
func NormalizeRequestPath(path string) (string, bool) {
	return normalizeRequestPath(path, skewgateHCM)
}

// NormalizePath is NormalizeRequestPath for paths known to be valid; a path Envoy refuses is
// returned unchanged.
func NormalizePath(path string) string {
	if p, ok := NormalizeRequestPath(path); ok {
		return p
	}
	return path
}
