package dataplane

import (
	"net/http"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Behaviours that the supported Envoy releases (1.37.6, 1.38.4, 1.39.1, 1.40.0) changed against
// the copies the rows were first read in, or that those copies already had and the stand-in
// missed; CONFORMANCE.md rows 3, 25 and 30.

// TestSafeRegexLatin1: safe_regex is RE2 in Latin-1 mode at every supported release
// (CVE-2026-73552): a byte at or above 0x80 is one character, so "." does not match the two bytes
// of a UTF-8 "é" (in UTF-8 mode, the Go regexp default, it would), ".." does, and a pattern's own
// non-ASCII bytes still match themselves. The same holds for a route's path safe_regex and a header
// matcher's safe_regex.
func TestSafeRegexLatin1(t *testing.T) {
	const e = "\xc3\xa9" // "é" in UTF-8
	for _, c := range []struct {
		re, s string
		want  bool
	}{
		{`/a.b`, "/a" + e + "b", false},
		{`/a..b`, "/a" + e + "b", true},
		{`/a` + e + `b`, "/a" + e + "b", true},
		{`/a[^/]b`, "/a" + e + "b", false},
		{`/a[^/]{2}b`, "/a" + e + "b", true},
		{`/a.b`, "/a\xffb", true}, // not UTF-8 at all: still one byte, one character
		{`/a.b`, "/axb", true},
	} {
		if got := fullMatch(c.re, c.s); got != c.want {
			t.Errorf("fullMatch(%q, %q) = %v, want %v", c.re, c.s, got, c.want)
		}
	}
	path := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `/v/.`}}}
	if got, _ := matchPathSpecifier(path, "/v/"+e); got {
		t.Errorf("path safe_regex /v/. matched /v/%s: one character for two bytes", e)
	}
	hdr := routeTo("r", "a", &routev3.HeaderMatcher{Name: "x-n", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `.`}}}}})
	if routeMatches(hdr, &requestView{path: "/", header: http.Header{"X-N": {e}}}) {
		t.Errorf("header safe_regex . matched the two bytes of %q", e)
	}
}

// TestHeaderMatcherRepeatedValues: a header sent as two entries (x-role: user, x-role: admin) is
// matched as "user,admin" by 1.37 and 1.38 and value by value from 1.39.0 on
// (match_headers_individually), so a route for exact "admin" takes the request only on 1.39.1 and
// 1.40.0, and one for exact "user,admin" only on 1.37.6 and 1.38.4. A single entry "user,admin"
// is one value everywhere.
func TestHeaderMatcherRepeatedValues(t *testing.T) {
	for v, want := range map[string]bool{"1.37.6": false, "1.38.4": false, "1.39.1": true, "1.40.0": true, "2.0.0": true, "1.40": false} {
		if got := matchHeadersIndividually(v); got != want {
			t.Errorf("matchHeadersIndividually(%q) = %v, want %v", v, got, want)
		}
	}
	exact := func(s string) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: "x-role", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
			StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}}}
	}
	two := http.Header{"X-Role": {"user", "admin"}}
	one := http.Header{"X-Role": {"user,admin"}}
	for _, c := range []struct {
		perValue bool
		h        http.Header
		exact    string
		want     bool
	}{
		{false, two, "admin", false}, {false, two, "user,admin", true}, {false, one, "user,admin", true},
		{true, two, "admin", true}, {true, two, "user", true}, {true, two, "user,admin", false},
		{true, one, "user,admin", true}, {true, one, "admin", false},
	} {
		got := routeMatches(routeTo("r", "a", exact(c.exact)), &requestView{path: "/", header: c.h, perValue: c.perValue})
		if got != c.want {
			t.Errorf("perValue %v, x-role %q, exact %q: matched %v, want %v", c.perValue, c.h["X-Role"], c.exact, got, c.want)
		}
	}

	// Through the listener: the release the data plane stands in for decides.
	for _, c := range []struct{ version, want string }{{"1.38.4", "b"}, {"1.40.0", "a"}} {
		t.Run(c.version, func(t *testing.T) {
			a, b := newUpstream(t, "a"), newUpstream(t, "b")
			f := startFrontWith(t, Delta, func(cfg *Config) { cfg.EnvoyVersion = c.version },
				listener(t, nil), routes(routeTo("admin", "a", exact("admin")), routeTo("default", "b")),
				plainCluster("a", a.addr()), plainCluster("b", b.addr()))
			f.waitActive("a")
			f.waitActive("b")
			if code, body := get(t, f.client(false), f.url("/x"), "x-role", "user", "x-role", "admin"); code != 200 || body != c.want {
				t.Errorf("Envoy %s, x-role: user and x-role: admin: %d from %q, want 200 from %q", c.version, code, body, c.want)
			}
		})
	}
}

// TestIgnorePathParametersRefused: a route configuration with ignore_path_parameters_in_path_matching
// is NACKed (Envoy would match on the path without each segment's ";" parameters,
// CVE-2026-73511, which the stand-in does not model); without it the same configuration is accepted.
func TestIgnorePathParametersRefused(t *testing.T) {
	rc := routes(routeTo("r", "a"))
	if err := checkRouteConfiguration(rc); err != nil {
		t.Fatalf("plain route configuration refused: %v", err)
	}
	rc.IgnorePathParametersInPathMatching = true
	const want = "route configuration routes: ignore_path_parameters_in_path_matching is not supported"
	if err := checkRouteConfiguration(rc); err == nil || err.Error() != want {
		t.Fatalf("with ignore_path_parameters_in_path_matching: %v, want %q", err, want)
	}
}

// TestWatchModifyRefused: an SDS secret whose watched_directory sets watch_modify (Envoy 1.39.0 and
// later reload on in-place writes then, which the stand-in does not watch for) is NACKed; the same
// secret without it is accepted.
func TestWatchModifyRefused(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := newPKI(t).issueFiles(t, dir, "front", []string{"front"}, false)
	s := newSecretStore(t.Context(), t.Logf)
	sec := certSecret("front-cert", cert, key, dir)
	if err := s.update([]*anypb.Any{anyOf(t, sec)}); err != nil {
		t.Fatalf("secret with a watched directory refused: %v", err)
	}
	sec.GetTlsCertificate().WatchedDirectory.WatchModify = true
	const want = "secret front-cert: watched_directory.watch_modify is not supported"
	if err := s.update([]*anypb.Any{anyOf(t, sec)}); err == nil || err.Error() != want {
		t.Fatalf("with watch_modify: %v, want %q", err, want)
	}
}

// TestClusterHeaderFirstValue: of a cluster_header sent twice, Envoy routes by the first value
// (HeaderClusterSpecifierPlugin::route: "only the first value is used"), not by the joined "a,b",
// which would name no cluster.
func TestClusterHeaderFirstValue(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	f := startFront(t, Delta, listener(t, nil), routes(routeByHeader("by-header", "x-route")),
		plainCluster("a", a.addr()), plainCluster("b", b.addr()))
	f.waitActive("a")
	f.waitActive("b")
	for _, c := range []struct{ first, second, want string }{{"a", "b", "a"}, {"b", "a", "b"}} {
		if code, body := get(t, f.client(false), f.url("/x"), "x-route", c.first, "x-route", c.second); code != 200 || body != c.want {
			t.Errorf("x-route: %s and x-route: %s: %d %q, want 200 from %s", c.first, c.second, code, body, c.want)
		}
	}
}
