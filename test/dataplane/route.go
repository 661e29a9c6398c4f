package dataplane

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// requestView exposes a request's headers the way Envoy's header matchers see them: pseudo-headers
// included, multiple values joined with "," (config/route/v3 HeaderMatcher: "header values are
// concatenated with a comma"), except where perValue says a route's header matcher looks at each
// value on its own.
type requestView struct {
	method, path, authority, scheme string
	header                          http.Header
	// perValue: a route header matcher matches a header sent as several entries when one of them
	// matches. Envoy does so from 1.39.0 on (changelogs/1.39.0.yaml, minor_behavior_changes, http:
	// "Such headers are now matched individually, so a rule matching admin matches, and a rule
	// matching user,admin no longer does", runtime guard envoy.reloadable_features.
	// match_headers_individually, on by default); 1.37 and 1.38 match the joined value. With
	// invert_match the any-value result is inverted: neither the changelog nor a code copy that could
	// be read says more.
	perValue bool
}

// matchHeadersIndividually says whether the Envoy release v (major.minor.patch) matches a route's
// header matcher against each value of a repeated header (1.39.0 and later) rather than against the
// values joined with ",".
func matchHeadersIndividually(v string) bool {
	n, err := parseVersion(v)
	return err == nil && (n[0] > 1 || n[0] == 1 && n[1] >= 39)
}

// first is a header's first value, "" when it is missing: what HeaderClusterSpecifierPlugin::route
// reads of a cluster_header ("This is an implicitly untrusted header, so per the API documentation
// only the first value is used", source/common/router/header_cluster_specifier.cc in a main copy
// of 2023 or later, whose commit was not recorded).
func (v *requestView) first(name string) string {
	if name != "" && name[0] == ':' {
		val, _ := v.get(name)
		return val
	}
	if vals := v.header[http.CanonicalHeaderKey(name)]; len(vals) > 0 {
		return vals[0]
	}
	return ""
}

// values is every value of a header as the route's header matchers see them: the joined value, or
// each value on its own when v.perValue.
func (v *requestView) values(name string) ([]string, bool) {
	if name == "" || name[0] == ':' || !v.perValue {
		val, ok := v.get(name)
		return []string{val}, ok
	}
	vals, ok := v.header[http.CanonicalHeaderKey(name)]
	return vals, ok
}

func (v *requestView) get(name string) (string, bool) {
	switch name {
	case ":method":
		return v.method, true
	case ":path":
		return v.path, true
	case ":authority":
		return v.authority, true
	case ":scheme":
		return v.scheme, true
	}
	vals, ok := v.header[http.CanonicalHeaderKey(name)]
	if !ok {
		return "", false
	}
	return strings.Join(vals, ","), true
}

var (
	regexMu    sync.Mutex
	regexCache = map[string]*regexp.Regexp{}
)

// fullMatch compiles RE2 (safe_regex) and matches the whole value, as Envoy's RegexMatcher does,
// in RE2's Latin-1 mode: every supported release (1.37.6, 1.38.4, 1.39.1, 1.40.0) switched
// safe_regex from UTF-8 to Latin-1 for CVE-2026-73552 (changelogs/1.37.6.yaml, 1.38.4.yaml,
// 1.39.1.yaml, 1.40.0.yaml, area safe_regex: "HTTP headers are not UTF-8 encoded and must use
// Latin1 charset for regex expressions", runtime guard envoy.reloadable_features.re2_use_latin1_mode).
// So a byte at or above 0x80 is one character to the pattern, and "." does not take a two-byte
// UTF-8 sequence whole.
func fullMatch(re, s string) bool {
	regexMu.Lock()
	r, ok := regexCache[re]
	if !ok {
		r = regexp.MustCompile("^(?:" + latin1(re) + ")$")
		regexCache[re] = r
	}
	regexMu.Unlock()
	return r.MatchString(latin1(s))
}

// latin1 reads s as Latin-1: each byte becomes the character of the same value, written as UTF-8,
// which is what Go's regexp reads. RE2 in Latin-1 mode reads pattern and text that way.
func latin1(s string) string {
	i := 0
	for i < len(s) && s[i] < 0x80 {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) * 2)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		b.WriteRune(rune(s[i]))
	}
	return b.String()
}

// routeEntry is a matched route. The cluster of a cluster_header route is read from the request
// headers when the route is matched (RouteEntryImplBase::clusterEntry builds a dynamic route entry
// from HeaderClusterSpecifierPlugin::route, source/common/router/config_impl.cc and
// header_cluster_specifier.cc): a later change of the header does not move the request unless the
// route cache is cleared and the route matched again. A missing header names no cluster.
type routeEntry struct {
	vhost   *routev3.VirtualHost
	route   *routev3.Route
	cluster string
}

// routeCache is the connection manager's cached route of one stream: matched against the route
// configuration snapped when the request arrived, re-matched only at the next route() after a
// filter cleared the cache (ActiveStream::refreshCachedRoute / clearRouteCache in
// source/common/http/conn_manager_impl.cc).
type routeCache struct {
	rc      *routev3.RouteConfiguration
	view    *requestView
	entry   *routeEntry
	valid   bool
	matches int // how often the route was matched, for tests
}

func (rc *routeCache) route() *routeEntry {
	if !rc.valid {
		rc.entry, rc.valid = matchRoute(rc.rc, rc.view), true
		rc.matches++
	}
	return rc.entry
}

func (rc *routeCache) clear() { rc.valid = false }

// checkRouteConfiguration validates an RDS route configuration and refuses what the data plane does
// not implement (checkRoute), so that it NACKs rather than routes differently from Envoy.
// ignore_path_parameters_in_path_matching is refused: with it Envoy matches routes on the path
// without the ";" parameters of each segment (PathUtil::removePathParameters, per segment since
// CVE-2026-73511, changelogs/1.37.6.yaml, 1.38.4.yaml, 1.39.1.yaml, 1.40.0.yaml, area
// url_normalization, runtime guard envoy.reloadable_features.strip_path_parameters_per_segment),
// which the stand-in does not model. skewgate never sets it.
func checkRouteConfiguration(rc *routev3.RouteConfiguration) error {
	if err := rc.ValidateAll(); err != nil {
		return err
	}
	if rc.GetIgnorePathParametersInPathMatching() {
		return errors.New("route configuration " + rc.GetName() + ": ignore_path_parameters_in_path_matching is not supported")
	}
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			if err := checkRoute(r); err != nil {
				return fmt.Errorf("route %s: %w", r.Name, err)
			}
		}
	}
	return nil
}

// checkRoute rejects route features the data plane does not implement, so that a config relying on
// them fails loudly (NACK) instead of being served differently.
func checkRoute(r *routev3.Route) error {
	if _, ok := r.Match.GetPathSpecifier().(*routev3.RouteMatch_Prefix); !ok {
		if _, known := matchPathSpecifier(r.Match, "/"); !known { // pathmatch.go
			return fmt.Errorf("path specifier %T is not supported", r.Match.GetPathSpecifier())
		}
	}
	for _, q := range r.Match.QueryParameters {
		if _, ok := q.QueryParameterMatchSpecifier.(*routev3.QueryParameterMatcher_StringMatch); !ok {
			return fmt.Errorf("query parameter matcher %s: only string_match is supported", q.Name)
		}
	}
	for _, h := range r.Match.Headers {
		switch spec := h.HeaderMatchSpecifier.(type) {
		case *routev3.HeaderMatcher_PresentMatch:
		case *routev3.HeaderMatcher_StringMatch:
			if _, ok := matchString(spec.StringMatch, ""); !ok {
				return fmt.Errorf("header matcher %s: string pattern %T is not supported", h.Name, spec.StringMatch.GetMatchPattern())
			}
		default:
			return fmt.Errorf("header matcher %s: only present_match and string_match are supported", h.Name)
		}
	}
	if r.GetRoute() == nil && r.GetDirectResponse() == nil {
		return errors.New("only route and direct_response actions are supported")
	}
	return nil
}

// matchRoute returns the first route whose match accepts the request (Envoy: routes are matched in
// order, first match wins; config/route/v3 VirtualHost.routes).
func matchRoute(rc *routev3.RouteConfiguration, v *requestView) *routeEntry {
	if rc == nil {
		return nil
	}
	for _, vh := range rc.VirtualHosts {
		if !domainMatches(vh.Domains, v.authority) {
			continue
		}
		for _, r := range vh.Routes {
			if routeMatches(r, v) {
				e := &routeEntry{vhost: vh, route: r, cluster: r.GetRoute().GetCluster()}
				if hdr := r.GetRoute().GetClusterHeader(); hdr != "" {
					e.cluster = v.first(hdr)
				}
				return e
			}
		}
		return nil // the first matching virtual host decides
	}
	return nil
}

func routeMatches(r *routev3.Route, v *requestView) bool {
	m := r.Match
	path := v.path
	if p, ok := m.PathSpecifier.(*routev3.RouteMatch_Prefix); ok {
		if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().Value {
			if !strings.HasPrefix(strings.ToLower(path), strings.ToLower(p.Prefix)) {
				return false
			}
		} else if !strings.HasPrefix(path, p.Prefix) {
			return false
		}
	} else if ok, _ := matchPathSpecifier(m, path); !ok { // pathmatch.go
		return false
	}
	if !matchQueryParameters(m.QueryParameters, path) {
		return false
	}
	for _, h := range m.Headers {
		vals, ok := v.values(h.Name)
		var matched bool
		switch spec := h.HeaderMatchSpecifier.(type) {
		case *routev3.HeaderMatcher_PresentMatch:
			matched = ok == spec.PresentMatch
		case *routev3.HeaderMatcher_StringMatch:
			for i := 0; ok && !matched && i < len(vals); i++ {
				matched, _ = matchString(spec.StringMatch, vals[i]) // pathmatch.go
			}
		}
		// A missing header never matches, also inverted (HeaderUtility::matchHeaders), except
		// present_match, whose absence is its own answer.
		if _, present := h.HeaderMatchSpecifier.(*routev3.HeaderMatcher_PresentMatch); !present && !ok {
			return false
		}
		if matched == h.InvertMatch {
			return false
		}
	}
	return true
}

func domainMatches(domains []string, authority string) bool {
	host := authority
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	for _, d := range domains {
		if d == "*" || strings.EqualFold(d, host) || strings.EqualFold(d, authority) {
			return true
		}
	}
	return false
}
