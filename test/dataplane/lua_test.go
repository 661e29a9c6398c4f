package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func inline(code string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: code}}
}

// Row 42: the filter's config and script load.
func TestLuaConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  *luav3.Lua
		want string
	}{
		{"both sources", &luav3.Lua{InlineCode: "x=1", DefaultSourceCode: inline("x=1")}, "only one of `inline_code` or `default_source_code`"},
		{"syntax error", &luav3.Lua{DefaultSourceCode: inline("function envoy_on_request(")}, "script load error"},
		{"top-level error", &luav3.Lua{InlineCode: "error('boom')"}, "script load error"},
		{"source_codes", &luav3.Lua{InlineCode: "x=1", SourceCodes: map[string]*corev3.DataSource{"a": inline("y=1")}}, "source_codes are not supported"},
		{"file source", &luav3.Lua{DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/x.lua"}}}, "only inline"},
	} {
		if _, err := newLuaFilter(c.cfg, t.Logf); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	f, err := newLuaFilter(&luav3.Lua{InlineCode: "function envoy_on_request(h) end"}, t.Logf)
	if err != nil || !f.clearRouteCache {
		t.Fatalf("inline_code: %v, clear_route_cache %v (default true)", err, f != nil && f.clearRouteCache)
	}
	f, _ = newLuaFilter(&luav3.Lua{DefaultSourceCode: inline("x=1"), ClearRouteCache: wrapperspb.Bool(false)}, t.Logf)
	if f.clearRouteCache {
		t.Fatal("clear_route_cache false not kept")
	}
}

func runLua(t *testing.T, code string, r *http.Request) (*httptest.ResponseRecorder, bool, int, []string) {
	t.Helper()
	var logs []string
	f, err := newLuaFilter(&luav3.Lua{DefaultSourceCode: inline(code)}, func(format string, a ...any) { logs = append(logs, format) })
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	modified := 0
	responded := f.onRequest(rec, r, func() { modified++ })
	return rec, responded, modified, logs
}

// Row 43: headers():get joins every value with ',', add appends an entry and clears the route
// cache (onHeadersModified); a Lua error lets the request continue with what was added before.
func TestLuaHeadersAndErrors(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "https://front/x", nil)
	r.Header.Add("X-A", "1")
	r.Header.Add("X-A", "2")
	_, responded, modified, logs := runLua(t, `function envoy_on_request(h)
	  local hs = h:headers()
	  hs:add("x-got", hs:get("x-a"))
	  hs:add("x-got", "b\0cut")
	  hs:replace("x-a", "z")
	end`, r)
	if responded || modified != 2 || !slicesEqual(r.Header.Values("X-Got"), []string{"1,2", "b"}) || r.Header.Get("X-A") != "1" {
		t.Fatalf("responded %v, modified %d, headers %v", responded, modified, r.Header)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "script log") {
		t.Fatalf("the missing replace() is a script error: logs %q", logs)
	}
	_, responded, _, logs = runLua(t, `function envoy_on_request(h) coroutine.yield() end`, httptest.NewRequest(http.MethodGet, "https://front/x", nil))
	if responded || len(logs) != 1 || !strings.Contains(logs[0], "unexpected yield") {
		t.Fatalf("yield: responded %v, logs %q", responded, logs)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// Row 44: respond() is a local reply: :status 200..599, the table's headers, content-length, and
// text/plain only when no content-type was given; the script ends there.
func TestLuaRespond(t *testing.T) {
	rec, responded, _, _ := runLua(t, `function envoy_on_request(h)
	  h:respond({[":status"] = "503", ["retry-after"] = "1", ["x-m"] = {"a", "b"}}, "no")
	  h:headers():add("x-after", "1")
	end`, httptest.NewRequest(http.MethodGet, "https://front/x", nil))
	if !responded || rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("Content-Type") != "text/plain" ||
		rec.Header().Get("Content-Length") != "2" || len(rec.Header().Values("X-M")) != 2 || rec.Body.String() != "no" {
		t.Fatalf("responded %v: %d %v %q", responded, rec.Code, rec.Header(), rec.Body.String())
	}
	r := httptest.NewRequest(http.MethodGet, "https://front/x", nil)
	rec, responded, _, logs := runLua(t, `function envoy_on_request(h)
	  h:headers():add("x-before", "1")
	  h:respond({[":status"] = "99"}, "no")
	end`, r)
	if responded || rec.Code != 200 || r.Header.Get("X-Before") != "1" || len(logs) != 1 {
		t.Fatalf(":status 99: responded %v, code %d, headers %v, logs %q", responded, rec.Code, r.Header, logs)
	}
}

// Row 45: the downstream SSL connection: nil without TLS; validated false on a resumed session;
// the subject in BoringSSL's RFC 2253 form; the digest in lowercase hex.
func TestLuaSSLConnection(t *testing.T) {
	code := `function envoy_on_request(h)
	  local ssl = h:streamInfo():downstreamSslConnection()
	  if ssl == nil then h:headers():add("x-ssl", "nil") return end
	  h:headers():add("x-ssl", tostring(ssl:peerCertificatePresented()) .. " " .. tostring(ssl:peerCertificateValidated()))
	  h:headers():add("x-subject", ssl:subjectPeerCertificate())
	  h:headers():add("x-digest", ssl:sha256PeerCertificateDigest())
	end`
	r := httptest.NewRequest(http.MethodGet, "https://front/x", nil)
	r.TLS = nil
	runLua(t, code, r)
	if r.Header.Get("X-Ssl") != "nil" {
		t.Fatalf("without TLS: %v", r.Header)
	}
	cert := &x509.Certificate{Raw: []byte("der"), RawSubject: mustSubject(t)}
	for _, c := range []struct {
		resumed bool
		want    string
	}{{false, "true true"}, {true, "true false"}} {
		r := httptest.NewRequest(http.MethodGet, "https://front/x", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}, DidResume: c.resumed}
		runLua(t, code, r)
		if got := r.Header.Get("X-Ssl"); got != c.want {
			t.Errorf("resumed %v: %q, want %q", c.resumed, got, c.want)
		}
		if got := r.Header.Get("X-Subject"); got != `1.2.3=#0C03612C62,CN=\ a\,b\+c\\\"\<\>\;=\C3\BC\ +O=\#x,O=org` {
			t.Errorf("subject %q", got)
		}
		// sha256("der"), lowercase (Hex::encode)
		if got := r.Header.Get("X-Digest"); got != hexSum([]byte("der")) || strings.ToLower(got) != got || len(got) != 64 {
			t.Errorf("digest %q", got)
		}
	}
}

func mustSubject(t *testing.T) []byte {
	der, err := asn1.Marshal(pkix.RDNSequence{
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: "org"}},
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte("#x")}},
			{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(` a,b+c\"<>;=ü `)}}},
		{{Type: asn1.ObjectIdentifier{1, 2, 3}, Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte("a,b")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Row 46: a value that does not decode stops BoringSSL's print; the text so far is returned.
func TestRFC2253Truncation(t *testing.T) {
	der, _ := asn1.Marshal(pkix.RDNSequence{
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "first"}},
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte("ab\xffcd")}}},
	})
	if got := rfc2253(der); got != "CN=ab" {
		t.Fatalf("%q, want the print to stop at the invalid byte", got)
	}
}
