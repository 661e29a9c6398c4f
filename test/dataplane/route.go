package dataplane

import (
	"net/http"
	"regexp"
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// requestView exposes a request's headers the way Envoy's header matchers see them: pseudo-headers
// included, multiple values joined with "," (Envoy: "header values are concatenated with a comma" for
// matching, config/route/v3 HeaderMatcher).
type requestView struct {
	method, path, authority, scheme string
	header                          http.Header
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

// fullMatch compiles RE2 (safe_regex) and matches the whole value, as Envoy's RegexMatcher does.
func fullMatch(re, s string) bool {
	regexMu.Lock()
	r, ok := regexCache[re]
	if !ok {
		r = regexp.MustCompile("^(?:" + re + ")$")
		regexCache[re] = r
	}
	regexMu.Unlock()
	return r.MatchString(s)
}

// matchRoute returns the first route whose match accepts the request (Envoy: routes are matched in
// order, first match wins; config/route/v3 VirtualHost.routes). Only the matchers skewgate emits are
// understood; any other matcher does not match.
func matchRoute(rc *routev3.RouteConfiguration, v *requestView) *routev3.Route {
	if rc == nil {
		return nil
	}
	for _, vh := range rc.VirtualHosts {
		if !domainMatches(vh.Domains, v.authority) {
			continue
		}
	routes:
		for _, r := range vh.Routes {
			m := r.Match
			switch p := m.PathSpecifier.(type) {
			case *routev3.RouteMatch_Prefix:
				if !strings.HasPrefix(v.path, p.Prefix) {
					continue
				}
			default:
				if ok, _ := matchPathSpecifier(m, v.path); !ok { // pathmatch.go
					continue
				}
			}
			if !matchQueryParameters(m.QueryParameters, v.path) {
				continue
			}
			for _, h := range m.Headers {
				val, ok := v.get(h.Name)
				var matched bool
				switch spec := h.HeaderMatchSpecifier.(type) {
				case *routev3.HeaderMatcher_PresentMatch:
					matched = ok == spec.PresentMatch
				case *routev3.HeaderMatcher_StringMatch:
					if !ok {
						break
					}
					matched, _ = matchString(spec.StringMatch, val) // pathmatch.go
				}
				if matched == h.InvertMatch {
					continue routes
				}
			}
			return r
		}
	}
	return nil
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
