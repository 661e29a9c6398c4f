package xds

import (
	_ "embed"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/xds/envoyconf"
)

const filterLua = "envoy.filters.http.lua"

// IdentityRefusalScript answers, after ext_proc, a request the identity filter refused when ext_proc
// did not answer it (identity_refusal.lua). The test data plane runs the same text.
//
//go:embed identity_refusal.lua
var IdentityRefusalScript string

// luaFilter is one Lua filter running script. What each field does, in Envoy's Lua filter
// (source/extensions/filters/http/lua/lua_filter.cc and lua_filter.h, the stored copies of main
// after 1.40.0; no copy at a release tag is stored):
//
//   - default_source_code, an inline string: the code every request runs when no route names another
//     (FilterConfig reads it with Config::DataSource::read; no route here has a LuaPerRoute). Setting
//     both it and the deprecated inline_code is a configuration error; inline_code is left unset.
//   - stat_prefix: the filter's counters become <connection manager prefix>.lua.<stat_prefix>.errors
//     and .executions (FilterConfig, generateStats), so the two Lua filters count apart. A script
//     error is counted there, logged, and lets the request continue with the header changes made so
//     far (Filter::doHeaders, scriptError): the identity script writes its headers last.
//   - clear_route_cache false: a header the script changes does not clear the route cache
//     (DecoderCallbacks::onHeadersModified returns before clearRouteCache when the config's
//     clearRouteCache() is false; it defaults to true; the field came with envoy pull request 38514,
//     merged February 2025, so every supported release has it). The route, and with it the ext_proc metadata of
//     the anonymous twins (routes.go), stays the one the connection manager chose from the request as
//     it arrived: after sanitizing X-Forwarded-Client-Cert and removing internal_only_headers,
//     before any filter. No Lua change can re-route a request; ext_proc's answer clears the cache,
//     and no route matches a header a Lua filter sets (X-Remote-*, the refusal marker).
func luaFilter(name, statPrefix, script string) (*hcmv3.HttpFilter, error) {
	cfg, err := envoyconf.Pack(&luav3.Lua{
		DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: script}},
		StatPrefix:        statPrefix,
		ClearRouteCache:   wrapperspb.Bool(false),
	})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// identityFilters are the Lua filter that sets identity (before ext_proc) and the one that answers
// its refusals when ext_proc does not (after ext_proc). The identity filter owns X-Remote-* for
// every request: it sets them from the verified client certificate, in the same request and with no
// external call, so a certificate user's identity never depends on ext_proc (docs/security.md).
func identityFilters(forwardUID bool) (identity, refusal *hcmv3.HttpFilter, err error) {
	if identity, err = luaFilter(filterLua+".identity", "skewgate_identity", IdentityScriptFor(forwardUID)); err != nil {
		return nil, nil, err
	}
	if refusal, err = luaFilter(filterLua+".refusal", "skewgate_identity_refusal", IdentityRefusalScript); err != nil {
		return nil, nil, err
	}
	return identity, refusal, nil
}
