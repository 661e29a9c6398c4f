package dataplane

import (
	"net/http"
	"net/http/httptest"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestParseAndDecodeQueryKeepsFirstValues(t *testing.T) {
	for _, c := range []struct {
		path      string
		name, val string
		present   bool
	}{
		{"/p?watch=1&watch=0", "watch", "1", true},
		{"/p?w%61tch=0", "watch", "", false},   // not decoded (parseQueryString): no "watch"
		{"/p?watch=%31", "watch", "%31", true}, // the value is not decoded either
		{"/p?watch", "watch", "", true},
		{"/p?watch=a+b", "watch", "a+b", true},     // '+' is not decoded
		{"/p?watch=%zz", "watch", "%zz", true},     // an invalid escape stays
		{"/p?watch=1;x=2", "watch", "1;x=2", true}, // ';' separates nothing
		{"/p?a=1&", "", "", false},                 // a trailing '&' makes no pair
		{"/p?&a=1", "", "", true},                  // a leading one does
		{"/p", "watch", "", false},
	} {
		v, ok := parseAndDecodeQuery(c.path)[c.name]
		if ok != c.present || v != c.val {
			t.Errorf("%s: %s = %q, %v; want %q, %v", c.path, c.name, v, ok, c.val, c.present)
		}
	}
}

func TestPathSpecifiers(t *testing.T) {
	re := func(r string) *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: r}}}
	}
	sep := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/apis/g"}}
	insensitive := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/apis/g"}, CaseSensitive: wrapperspb.Bool(false)}
	for _, c := range []struct {
		m    *routev3.RouteMatch
		path string
		want bool
	}{
		{re(`/a/[^/]+`), "/a/b?x=/y", true}, // the query is not matched
		{re(`/a/[^/]+`), "/a/b/c", false},   // a full match, not a search
		{re(`/a`), "/a#frag", true},
		{sep, "/apis/g", true}, {sep, "/apis/g/v1", true}, {sep, "/apis/gx", false}, {sep, "/apis/g?x", true},
		{sep, "/APIS/g", false}, {insensitive, "/APIS/G/v", true},
		{&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/a"}}, "/a?b", true},
	} {
		if got, known := matchPathSpecifier(c.m, c.path); got != c.want || !known {
			t.Errorf("%v on %s: %v (known %v), want %v", c.m.PathSpecifier, c.path, got, known, c.want)
		}
	}
}

func TestDirectResponse(t *testing.T) {
	route := &routev3.Route{
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 503, Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: `{"kind":"Status"}`}},
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: "content-type", Value: "application/json"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &corev3.HeaderValue{Key: "retry-after", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		},
	}
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		w := httptest.NewRecorder()
		directResponse(w, httptest.NewRequest(m, "/apis/g/v/r", nil), route)
		wantBody := `{"kind":"Status"}`
		if m == http.MethodHead {
			wantBody = ""
		}
		if w.Code != 503 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") != "1" || w.Body.String() != wantBody {
			t.Errorf("%s: %d %v %q", m, w.Code, w.Header(), w.Body.String())
		}
	}
	// Without a content type from the route, the local reply's text/plain.
	route.ResponseHeadersToAdd = nil
	w := httptest.NewRecorder()
	directResponse(w, httptest.NewRequest(http.MethodGet, "/", nil), route)
	if ct := w.Header().Get("Content-Type"); ct != "text/plain" {
		t.Errorf("content type %q", ct)
	}
}
