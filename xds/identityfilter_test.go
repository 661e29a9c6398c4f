package xds

import (
	"regexp"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

func filterNamed(t *testing.T, hcm *hcmv3.HttpConnectionManager, name string) int {
	t.Helper()
	for i, f := range hcm.HttpFilters {
		if f.Name == name {
			return i
		}
	}
	t.Fatalf("no filter %s", name)
	return -1
}

// TestIdentityFilterOwnsIdentity: the strip filter, first, removes every client copy of an identity
// header and of the refusal marker; the Lua identity filter comes next and runs identity.lua; ext_proc
// after it may not touch an identity header (a mutation of one fails), is not shown the client
// certificate, and the refusal filter after ext_proc runs identity_refusal.lua. Neither Lua filter
// clears the route cache, so no Lua header change re-selects the route.
func TestIdentityFilterOwnsIdentity(t *testing.T) {
	hcm := hcmOf(t, translated(t))
	strip, identity := filterNamed(t, hcm, filterHeaderMutation+".strip"), filterNamed(t, hcm, filterLua+".identity")
	extProc, refusal := filterNamed(t, hcm, filterExtProc), filterNamed(t, hcm, filterLua+".refusal")
	if !(strip == 0 && identity == 1 && extProc == 2 && refusal == 3) {
		t.Fatalf("filter order strip %d identity %d ext_proc %d refusal %d", strip, identity, extProc, refusal)
	}

	var hm headermutationv3.HeaderMutation
	if err := hcm.HttpFilters[strip].GetTypedConfig().UnmarshalTo(&hm); err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	var prefixes []string
	for _, m := range hm.GetMutations().GetRequestMutations() {
		if r := m.GetRemove(); r != "" {
			removed[r] = true
		}
		if p := m.GetRemoveOnMatch().GetKeyMatcher(); p != nil {
			prefixes = append(prefixes, p.GetPrefix())
		}
	}
	for _, h := range []string{wire.RemoteUserHeader, wire.RemoteGroupHeader, wire.RemoteUIDHeader, wire.IdentityRefusedHeader, wire.RouteHeader} {
		if !removed[h] {
			t.Errorf("the strip filter keeps a client's %s", h)
		}
	}
	if len(prefixes) != 1 || prefixes[0] != wire.RemoteExtraPrefix {
		t.Errorf("the strip filter removes the prefixes %v, want [%s]", prefixes, wire.RemoteExtraPrefix)
	}

	for i, script := range map[int]string{identity: IdentityScript, refusal: IdentityRefusalScript} {
		var l luav3.Lua
		if err := hcm.HttpFilters[i].GetTypedConfig().UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		if l.GetDefaultSourceCode().GetInlineString() != script || l.InlineCode != "" || len(l.SourceCodes) != 0 {
			t.Errorf("%s does not run its script as default_source_code alone", hcm.HttpFilters[i].Name)
		}
		if l.ClearRouteCache == nil || l.ClearRouteCache.Value {
			t.Errorf("%s: clear_route_cache %v, want false", hcm.HttpFilters[i].Name, l.ClearRouteCache)
		}
		if l.StatPrefix == "" {
			t.Errorf("%s: no stat_prefix", hcm.HttpFilters[i].Name)
		}
	}
	if !strings.Contains(IdentityRefusalScript, wire.IdentityRefusedHeader) {
		t.Errorf("identity_refusal.lua does not read %s", wire.IdentityRefusedHeader)
	}

	var ep extprocv3.ExternalProcessor
	if err := hcm.HttpFilters[extProc].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	disallowed := false
	for _, p := range ep.GetForwardRules().GetDisallowedHeaders().GetPatterns() {
		disallowed = disallowed || (p.GetExact() == wire.ForwardedCertHeader && p.IgnoreCase)
	}
	if !disallowed {
		t.Error("ext_proc is shown X-Forwarded-Client-Cert")
	}
	rules := ep.GetMutationRules()
	if !rules.GetDisallowIsError().GetValue() {
		t.Error("a disallowed mutation is ignored, not an error")
	}
	// RE2's full match, as the checker applies it to the lower-cased name; Go's regexp agrees on
	// this pattern (literals, one alternation, .*).
	re := regexp.MustCompile(`^(?:` + rules.GetDisallowExpression().GetRegex() + `)$`)
	for _, h := range []string{wire.RemoteUserHeader, wire.RemoteGroupHeader, wire.RemoteUIDHeader, wire.RemoteExtraPrefix + "scopes",
		wire.RemoteExtraPrefix + "authentication.kubernetes.io%2fcredential-id", wire.IdentityRefusedHeader} {
		if !re.MatchString(h) {
			t.Errorf("ext_proc may mutate %s", h)
		}
	}
	for _, h := range []string{wire.RouteHeader, "content-type", "retry-after", "x-remotex"} {
		if re.MatchString(h) {
			t.Errorf("ext_proc may not mutate %s, which it needs", h)
		}
	}

	var dtls tlsv3.DownstreamTlsContext
	if err := translated(t).Listeners[0].FilterChains[0].TransportSocket.GetTypedConfig().UnmarshalTo(&dtls); err != nil {
		t.Fatal(err)
	}
	if !dtls.GetDisableStatelessSessionResumption() || !dtls.DisableStatefulSessionResumption {
		t.Errorf("TLS sessions may resume (stateless disabled %v, stateful disabled %v): peerCertificateValidated is false on a resumed session",
			dtls.GetDisableStatelessSessionResumption(), dtls.DisableStatefulSessionResumption)
	}

	if hcm.ForwardClientCertDetails != hcmv3.HttpConnectionManager_SANITIZE_SET || hcm.SetCurrentClientCertDetails != nil {
		t.Errorf("XFCC %v %v, want SANITIZE_SET with the digest alone", hcm.ForwardClientCertDetails, hcm.SetCurrentClientCertDetails)
	}
}

// TestNoRouteMatchesALuaHeader: no route of a table with skew routes matches on a header a Lua filter
// sets, so even a route re-selection after them could not depend on one.
func TestNoRouteMatchesALuaHeader(t *testing.T) {
	rs, err := Translate(skewedTopology(3), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		for _, h := range r.GetMatch().GetHeaders() {
			n++
			if name := strings.ToLower(h.Name); strings.HasPrefix(name, "x-remote-") || name == wire.IdentityRefusedHeader {
				t.Errorf("route %s matches on %s", r.Name, h.Name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no header matcher in the table: nothing checked")
	}
}

// TestIdentityScriptForwardsUIDOnlyWhenTold: the listener's identity script forwards a certificate's
// UID only with ForwardCertificateUID, and the two texts differ in that one line.
func TestIdentityScriptForwardsUIDOnlyWhenTold(t *testing.T) {
	off, on := IdentityScriptFor(false), IdentityScriptFor(true)
	if !strings.Contains(off, "local FORWARD_UID = false\n") || strings.Contains(off, "FORWARD_UID = true") {
		t.Fatal("without ForwardCertificateUID the script does not keep FORWARD_UID false")
	}
	if on != strings.Replace(off, "local FORWARD_UID = false\n", "local FORWARD_UID = true\n", 1) || on == off {
		t.Fatal("with ForwardCertificateUID the script is not the same text with FORWARD_UID true")
	}
	for _, forward := range []bool{false, true} {
		o := testOptions()
		o.ForwardCertificateUID = forward
		rs, err := Translate(xdstest.Scenario(t, "testdata/one-upstream.in.yaml"), o)
		if err != nil {
			t.Fatal(err)
		}
		hcm := hcmOf(t, rs)
		var lua luav3.Lua
		if err := hcm.HttpFilters[filterNamed(t, hcm, filterLua+".identity")].GetTypedConfig().UnmarshalTo(&lua); err != nil {
			t.Fatal(err)
		}
		if got := lua.GetDefaultSourceCode().GetInlineString(); got != IdentityScriptFor(forward) {
			t.Errorf("ForwardCertificateUID %v: the listener's identity script is not IdentityScriptFor(%v)", forward, forward)
		}
	}
}
