package dataplane

import (
	"net/http"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestPathNormalization: the connection manager's path normalization in Envoy's order
// (ConnectionManagerUtility::maybeNormalizePath): fragment refused, escaped slashes per
// path_with_escaped_slashes_action, PathUtil::canonicalPath (dot-segment parameters stripped, then
// googleurl's CanonicalizePath), then merge_slashes. The cases marked "envoy" are those of Envoy's
// test/common/http/path_utility_test.cc (NormalizeValidPaths, NormalizeCasePath, InvalidPaths,
// MergeSlashes).
func TestPathNormalization(t *testing.T) {
	skewgate := skewgateHCM
	for _, tc := range []struct {
		name, in, want string
		hcm            *hcmv3.HttpConnectionManager
	}{
		{"envoy: parent dir", "/a/b/../c", "/a/c", nil},
		{"envoy: current dir", "/a/b/./c", "/a/b/c", nil},
		{"envoy: no leading slash", "a/b/../c", "/a/c", nil},
		{"envoy: more .. than segments", "/a/b/../../../../c", "/c", nil},
		{"envoy: ..\\ is ../", "/a/..\\c", "/c", nil},
		{"envoy: escaped high bytes kept", "/%c0%af", "/%c0%af", nil},
		{"envoy: escaped reserved kept, case kept", "/%5c%25", "/%5c%25", nil},
		{"envoy: %2E%2E is ..", "/a/b/%2E%2E/c", "/a/c", nil},
		{"envoy: %2E. is ..", "/a/b/%2E./c", "/a/c", nil},
		{"envoy: %2E is .", "/a/b/%2E/c", "/a/b/c", nil},
		{"envoy: bare ..", "..", "/", nil},
		{"envoy: leading ..", "/../a/b", "/a/b", nil},
		{"envoy: leading .", "/./a/b", "/a/b", nil},
		{"envoy: no case folding", "/A/B/C", "/A/B/C", nil},
		{"envoy: %2e%2e is ..", "/a/b/%2e%2e/c", "/a/c", nil},
		{"envoy: %2F kept with its case", "/a/%2F%2f/c", "/a/%2F%2f/c", nil},
		{"envoy: merge keeps the query's slashes", "/a//b?a=///c", "/a/b?a=///c", nil},
		{"envoy: merge keeps a trailing slash", "/a/b/c//", "/a/b/c/", nil},
		{"unreserved escapes decoded", "/apis/%61pps/v1/%64eployments", "/apis/apps/v1/deployments", nil},
		{"%2e inside a name is a dot", "/a%2eb", "/a.b", nil},
		{"..; segment is ..", "/api/v1/..;x=1/secrets", "/api/secrets", nil},
		{".; segment is .", "/api/.;x/v1", "/api/v1", nil},
		{"backslash is a slash", "/api\\v1\\pods", "/api/v1/pods", nil},
		{"characters that must be escaped", "/a\"b<c>^`{|}", "/a%22b%3Cc%3E%5E%60%7B%7C%7D", nil},
		{"not an escape: literal percent", "/a%zz%4", "/a%zz%4", nil},
		{"nested escape cannot become %00", "/a%%300", "/a%2500", nil},
		{"canonicalize before merging slashes", "/a//../b", "/a/b", nil},
		{"query not normalized", "/a/./b?x=/../%61", "/a/b?x=/../%61", nil},
		{"escaped slash kept (KEEP_UNCHANGED)", "/a%2Fb/../c", "/c", nil},
		{"UNESCAPE_AND_FORWARD decodes %2F first", "/a%2Fb/../c", "/a/c", &hcmv3.HttpConnectionManager{NormalizePath: wrapperspb.Bool(true),
			PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD}},
		{"normalize_path off: only merged", "/a/./b//c", "/a/./b/c", &hcmv3.HttpConnectionManager{MergeSlashes: true}},
		{"nothing set: untouched", "/a/./b//%61", "/a/./b//%61", &hcmv3.HttpConnectionManager{}},
	} {
		hcm := tc.hcm
		if hcm == nil {
			hcm = skewgate
		}
		got, ok := normalizeRequestPath(tc.in, hcm)
		if !ok || got != tc.want {
			t.Errorf("%s: %q -> %q (valid %v), want %q", tc.name, tc.in, got, ok, tc.want)
		}
	}
	for _, tc := range []struct {
		name, in string
		hcm      *hcmv3.HttpConnectionManager
	}{
		{"envoy: .%00..", "/xyz/.%00../abc", nil},
		{"envoy: %00.%00.", "/xyz/%00.%00./abc", nil},
		{"envoy: %%0000", "/xyz/AAAAA%%0000/abc", nil},
		{"fragment", "/api/v1/pods#x", nil},
		{"fragment without normalize_path", "/a#b", &hcmv3.HttpConnectionManager{}},
		{"REJECT_REQUEST with an escaped slash", "/a%2fb", &hcmv3.HttpConnectionManager{PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_REJECT_REQUEST}},
		{"REJECT_REQUEST with an escaped backslash", "/a%5Cb", &hcmv3.HttpConnectionManager{PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_REJECT_REQUEST}},
	} {
		hcm := tc.hcm
		if hcm == nil {
			hcm = skewgate
		}
		if got, ok := normalizeRequestPath(tc.in, hcm); ok {
			t.Errorf("%s: %q accepted as %q, want 400", tc.name, tc.in, got)
		}
	}
}

// TestPathNormalizedBeforeRouting: the normalized path is what the route table matches and what
// the upstream receives; a path Envoy refuses is answered 400 and reaches no upstream.
func TestPathNormalizedBeforeRouting(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	apps := routeTo("apps", "a")
	apps.Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/apis/apps/"}
	f := startFront(t, Delta, listener(t, func(h *hcmv3.HttpConnectionManager) {
		h.NormalizePath, h.MergeSlashes = wrapperspb.Bool(true), true
	}), routes(apps, routeTo("default", "b")), plainCluster("a", a.addr()), plainCluster("b", b.addr()))
	f.waitActive("a")
	f.waitActive("b")
	for _, h2 := range []bool{false, true} {
		c := f.client(h2)
		for _, tc := range []struct{ raw, upstream, want string }{
			{"/apis/%61pps/v1/deployments", "/apis/apps/v1/deployments", "a"},
			{"/apis/x/..;/apps/v1", "/apis/apps/v1", "a"},
			{"/apis\\apps\\v1", "/apis/apps/v1", "a"},
			{"/apis/b//../apps/v1?watch=1", "/apis/b/apps/v1?watch=1", "b"},
		} {
			req, _ := http.NewRequest(http.MethodGet, f.url("/"), nil)
			req.URL.Opaque = tc.raw
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("h2=%v %s: %v", h2, tc.raw, err)
			}
			resp.Body.Close()
			u := map[string]*upstream{"a": a, "b": b}[tc.want]
			if resp.StatusCode != 200 || u.last() == nil || u.last().RequestURI != tc.upstream {
				got := ""
				if u.last() != nil {
					got = u.last().RequestURI
				}
				t.Errorf("h2=%v %s: %d, upstream %s saw %q, want 200 and %q", h2, tc.raw, resp.StatusCode, tc.want, got, tc.upstream)
			}
		}
		before := a.count() + b.count()
		refused := []string{"/apis/apps/v1/%00", "/apis/v1/.%00./x"}
		if !h2 {
			// Go's HTTP/2 server itself resets a stream whose :path has an invalid escape.
			refused = append(refused, "/apis/%%300/x%00")
		}
		for _, raw := range refused {
			req, _ := http.NewRequest(http.MethodGet, f.url("/"), nil)
			req.URL.Opaque = raw
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("h2=%v %s: %v", h2, raw, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("h2=%v %s: %d, want 400 (path normalization failed)", h2, raw, resp.StatusCode)
			}
		}
		if n := a.count() + b.count(); n != before {
			t.Errorf("h2=%v: %d requests reached an upstream after refused paths", h2, n-before)
		}
	}
}

// FuzzCanonicalizeURLPath: whatever the input, the canonical path starts with '/', has no '\', and
// no "." or ".." segment is left (googleurl resolves them, also when spelled %2e).
func FuzzCanonicalizeURLPath(f *testing.F) {
	for _, s := range []string{"/a/b/../c", "a/..\\c", "/%2e%2E/x", "/a%%300", "/.%00../", "..", "/x/.%2e", "%", "/%2", "\\\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		out, _ := canonicalizeURLPath(p)
		if out == "" || out[0] != '/' || strings.IndexByte(out, '\\') >= 0 {
			t.Fatalf("%q -> %q", p, out)
		}
		for _, seg := range strings.Split(out, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q -> %q keeps a dot segment", p, out)
			}
		}
	})
}
