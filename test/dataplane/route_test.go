package dataplane

import (
	"net/http"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var accesslogFilterNC = accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
	ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"NC"}}}}

func stripFilter(t *testing.T, header string) *hcmv3.HttpFilter {
	return httpFilter(t, "envoy.filters.http.header_mutation", &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
		RequestMutations: []*mutationrulesv3.HeaderMutation{{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: header}}}}})
}

// TestRouteChosenBeforeFilters: the route (and the cluster_header cluster) is fixed when the
// headers arrive; a header_mutation filter that removes the routing header neither clears the
// route cache nor changes the cluster. Run over delta and SotW xDS.
func TestRouteChosenBeforeFilters(t *testing.T) {
	for _, p := range []Protocol{Delta, SotW} {
		t.Run(string(p), func(t *testing.T) {
			a, b := newUpstream(t, "a"), newUpstream(t, "b")
			f := startFront(t, p, listener(t, nil, stripFilter(t, "x-route")),
				routes(routeByHeader("by-header", "x-route"), routeTo("default", "b")),
				plainCluster("a", a.addr()), plainCluster("b", b.addr()))
			f.waitActive("a")
			f.waitActive("b")
			c := f.client(false)
			if code, body := get(t, c, f.url("/x"), "x-route", "a"); code != 200 || body != "a" {
				t.Fatalf("with x-route: a, after the strip filter: %d %q, want 200 from a (route and cluster fixed before filters)", code, body)
			}
			if got := a.last().Header.Get("X-Route"); got != "" {
				t.Errorf("the strip filter ran after routing but the header still reached the upstream: %q", got)
			}
			if code, body := get(t, c, f.url("/x")); code != 200 || body != "b" {
				t.Fatalf("without x-route: %d %q, want the default route to b", code, body)
			}
		})
	}
}

// TestUnknownClusterNC: a cluster_header naming no cluster, or a missing header on a cluster_header
// route, answers cluster_not_found_response_code (503 by default) with flag NC, which local reply
// mappers on NC rewrite.
func TestUnknownClusterNC(t *testing.T) {
	a := newUpstream(t, "a")
	noHeader := routeByHeader("no-header-needed", "x-route")
	noHeader.Match.Headers = []*routev3.HeaderMatcher{exact("x-missing-ok", "1")}
	notFound := routeByHeader("not-found-code", "x-route")
	notFound.Match.Headers = append(notFound.Match.Headers, exact("x-code", "404"))
	notFound.GetRoute().ClusterNotFoundResponseCode = routev3.RouteAction_NOT_FOUND
	mapper := func(h *hcmv3.HttpConnectionManager) {
		h.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{{
			Filter:       &accesslogFilterNC,
			HeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-mapped", Value: "nc"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}},
		}}}
	}
	f := startFront(t, Delta, listener(t, mapper), routes(noHeader, notFound, routeByHeader("by-header", "x-route")), plainCluster("a", a.addr()))
	f.waitActive("a")
	c := f.client(false)
	for _, tc := range []struct {
		hdr  []string
		code int
	}{
		{[]string{"x-route", "skewgate-extproc"}, 503},
		{[]string{"x-route", "nope"}, 503},
		{[]string{"x-missing-ok", "1"}, 503},
		{[]string{"x-route", "nope", "x-code", "404"}, 404},
		{[]string{"x-route", "a"}, 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, f.url("/"), nil)
		for i := 0; i < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%v: %d, want %d", tc.hdr, resp.StatusCode, tc.code)
		}
		if wantNC := tc.code != 200; (resp.Header.Get("x-mapped") == "nc") != wantNC {
			t.Errorf("%v: NC mapper applied = %v, want %v", tc.hdr, !wantNC, wantNC)
		}
	}
	if a.count() != 1 {
		t.Errorf("upstream a got %d requests, want 1", a.count())
	}
}

// TestInternalOnlyHeaders: internal_only_headers are removed before route selection from requests
// that are not internal; a peer inside internal_address_config whose request carries no XFF is
// internal and keeps them; without internal_address_config no peer is internal.
func TestInternalOnlyHeaders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cidr     string
		xff      string
		internal bool
	}{
		{"no internal_address_config", "", "", false},
		{"cidr that cannot match", "192.0.2.1", "", false},
		{"loopback is internal", "127.0.0.1", "", true},
		{"internal peer but XFF present", "127.0.0.1", "10.1.1.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newUpstream(t, "a"), newUpstream(t, "b")
			hcm := func(h *hcmv3.HttpConnectionManager) {
				h.UseRemoteAddress = wrapperspb.Bool(true)
				if tc.cidr != "" {
					h.InternalAddressConfig = &hcmv3.HttpConnectionManager_InternalAddressConfig{
						CidrRanges: []*corev3.CidrRange{{AddressPrefix: tc.cidr, PrefixLen: wrapperspb.UInt32(32)}}}
				}
			}
			rc := routes(routeByHeader("by-header", "x-route"), routeTo("default", "b"))
			rc.InternalOnlyHeaders = []string{"x-route"}
			f := startFront(t, Delta, listener(t, hcm), rc, plainCluster("a", a.addr()), plainCluster("b", b.addr()))
			f.waitActive("a")
			f.waitActive("b")
			hdr := []string{"x-route", "a"}
			if tc.xff != "" {
				hdr = append(hdr, "x-forwarded-for", tc.xff)
			}
			_, body := get(t, f.client(false), f.url("/"), hdr...)
			if want := map[bool]string{true: "a", false: "b"}[tc.internal]; body != want {
				t.Errorf("routed to %q, want %q", body, want)
			}
		})
	}
}

// TestRequestHeadersToRemove: RouteConfiguration.request_headers_to_remove applies when the router
// forwards: the header still matched the route, and the upstream does not see it.
func TestRequestHeadersToRemove(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	rc := routes(routeTo("needs-header", "a", present("x-drop")), routeTo("default", "b"))
	rc.RequestHeadersToRemove = []string{"x-drop"}
	f := startFront(t, Delta, listener(t, nil), rc, plainCluster("a", a.addr()), plainCluster("b", b.addr()))
	f.waitActive("a")
	f.waitActive("b")
	if _, body := get(t, f.client(false), f.url("/"), "x-drop", "1"); body != "a" {
		t.Fatalf("routed to %q, want a: removal must come after route matching", body)
	}
	if v := a.last().Header.Get("x-drop"); v != "" {
		t.Errorf("upstream saw x-drop=%q", v)
	}
}
