package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// luaFilter is envoy.filters.http.lua with the subset of its API that skewgate's script uses,
// run by gopher-lua (Lua 5.1 semantics, as LuaJIT; not LuaJIT itself). Sources, in Envoy's main
// copies: source/extensions/filters/http/lua/lua_filter.cc (FilterConfig, doHeaders,
// scriptError, luaRespond, DecoderCallbacks::respond, luaHeaders), wrappers.cc (HeaderMapWrapper),
// source/extensions/filters/common/lua/wrappers.cc (StreamInfo and SslConnection wrappers).
//
// The script is compiled when the listener arrives (a syntax error is a NACK, as Envoy's
// ThreadLocalState construction throws); each worker has its own VM (a pool here) and each request
// runs envoy_on_request in a new coroutine of it. What the API subset does not hold is absent: a
// script calling another method fails with a Lua error, as an Envoy without that method would.
type luaFilter struct {
	proto           *lua.FunctionProto
	clearRouteCache bool
	vms             sync.Pool
	logf            func(string, ...any)
}

// newLuaFilter reads the filter's config (FilterConfig::FilterConfig): the code is
// default_source_code or the deprecated inline_code, never both; clear_route_cache defaults to
// true. source_codes (per-route scripts) and a default_source_code read from a file or an
// environment variable are refused: skewgate uses neither.
func newLuaFilter(cfg *luav3.Lua, logf func(string, ...any)) (*luaFilter, error) {
	code := cfg.GetInlineCode()
	if ds := cfg.GetDefaultSourceCode(); ds != nil {
		if code != "" {
			return nil, errors.New("only one of `inline_code` or `default_source_code` can be set for the Lua filter")
		}
		switch {
		case ds.GetInlineString() != "":
			code = ds.GetInlineString()
		case len(ds.GetInlineBytes()) > 0:
			code = string(ds.GetInlineBytes())
		default:
			return nil, errors.New("the test data plane reads default_source_code only inline")
		}
	}
	if len(cfg.GetSourceCodes()) > 0 {
		return nil, errors.New("source_codes are not supported by the test data plane")
	}
	chunk, err := parse.Parse(strings.NewReader(code), "lua")
	if err != nil {
		return nil, fmt.Errorf("script load error: %w", err)
	}
	proto, err := lua.Compile(chunk, "lua")
	if err != nil {
		return nil, fmt.Errorf("script load error: %w", err)
	}
	f := &luaFilter{proto: proto, clearRouteCache: true, logf: logf}
	if v := cfg.GetClearRouteCache(); v != nil {
		f.clearRouteCache = v.Value
	}
	vm, err := f.newVM() // the top level runs once per worker; an error there is a load error too
	if err != nil {
		return nil, err
	}
	f.vms.Put(vm)
	return f, nil
}

func (f *luaFilter) newVM() (*lua.LState, error) {
	// A growing registry (gopher-lua's value stack): LuaJIT's has no small fixed bound.
	L := lua.NewState(lua.Options{RegistrySize: 1024, RegistryMaxSize: 1 << 20, RegistryGrowStep: 256})
	registerLuaTypes(L)
	L.Push(L.NewFunctionFromProto(f.proto))
	if err := L.PCall(0, 0, nil); err != nil {
		L.Close()
		return nil, fmt.Errorf("script load error: %w", err)
	}
	return L, nil
}

// luaStream is one request's StreamHandleWrapper.
type luaStream struct {
	w         http.ResponseWriter
	r         *http.Request
	modified  func() // onHeadersModified: clears the route cache when configured
	responded bool
}

// onRequest runs envoy_on_request (Filter::doHeaders). It returns true when the script answered
// with respond(). A script error is logged and the request continues with the headers the script
// changed before it (scriptError resets the wrappers; the status stays Continue); so does a script
// that yields (coroutine.yield: "script performed an unexpected yield").
func (f *luaFilter) onRequest(w http.ResponseWriter, r *http.Request, modified func()) bool {
	vm, _ := f.vms.Get().(*lua.LState)
	if vm == nil {
		var err error
		if vm, err = f.newVM(); err != nil {
			f.logf("lua: %v", err)
			return false
		}
	}
	defer f.vms.Put(vm)
	fn, ok := vm.GetGlobal("envoy_on_request").(*lua.LFunction)
	if !ok {
		return false // "envoy_on_request() function not found"
	}
	s := &luaStream{w: w, r: r, modified: modified}
	co, cancel := vm.NewThread()
	if cancel != nil {
		defer cancel()
	}
	handle := vm.NewUserData()
	handle.Value = s
	handle.Metatable = vm.GetTypeMetatable(luaHandleType)
	st, err, _ := vm.Resume(co, fn, handle)
	switch {
	case err != nil:
		f.logf("lua: script log: %v", err)
	case st == lua.ResumeYield && !s.responded:
		f.logf("lua: script log: script performed an unexpected yield")
	}
	return s.responded
}

const (
	luaHandleType  = "envoy.stream_handle"
	luaHeadersType = "envoy.header_map"
	luaInfoType    = "envoy.stream_info"
	luaSSLType     = "envoy.ssl_connection"
)

func registerLuaTypes(L *lua.LState) {
	reg := func(name string, fns map[string]lua.LGFunction) {
		mt := L.NewTypeMetatable(name)
		L.SetField(mt, "__index", L.SetFuncs(L.NewTable(), fns))
	}
	reg(luaHandleType, map[string]lua.LGFunction{
		"headers":    luaHeaders,
		"streamInfo": luaStreamInfo,
		"respond":    luaRespond,
	})
	reg(luaHeadersType, map[string]lua.LGFunction{"get": luaHeaderGet, "add": luaHeaderAdd})
	reg(luaInfoType, map[string]lua.LGFunction{"downstreamSslConnection": luaDownstreamSSL})
	reg(luaSSLType, map[string]lua.LGFunction{
		"peerCertificatePresented":    luaPeerPresented,
		"peerCertificateValidated":    luaPeerValidated,
		"subjectPeerCertificate":      luaSubjectPeer,
		"sha256PeerCertificateDigest": luaSHA256Peer,
	})
}

func checkStream(L *lua.LState) *luaStream {
	if s, ok := L.CheckUserData(1).Value.(*luaStream); ok {
		return s
	}
	L.ArgError(1, "stream handle expected")
	return nil
}

func wrap(L *lua.LState, typ string, v any) int {
	ud := L.NewUserData()
	ud.Value = v
	ud.Metatable = L.GetTypeMetatable(typ)
	L.Push(ud)
	return 1
}

func luaHeaders(L *lua.LState) int    { return wrap(L, luaHeadersType, checkStream(L)) }
func luaStreamInfo(L *lua.LState) int { return wrap(L, luaInfoType, checkStream(L)) }
func luaDownstreamSSL(L *lua.LState) int {
	// StreamInfoWrapper::luaDownstreamSslConnection: nil without a TLS connection.
	s := checkStream(L)
	if s.r.TLS == nil {
		L.Push(lua.LNil)
		return 1
	}
	return wrap(L, luaSSLType, s)
}

// luaHeaderGet is HeaderMapWrapper::luaGet: every value of the header joined by ','
// (HeaderUtility::getAllOfHeaderAsString), nil when absent.
func luaHeaderGet(L *lua.LState) int {
	s := checkStream(L)
	vs := s.r.Header.Values(L.CheckString(2))
	if len(vs) == 0 {
		L.Push(lua.LNil)
	} else {
		L.Push(lua.LString(strings.Join(vs, ",")))
	}
	return 1
}

// luaHeaderAdd is HeaderMapWrapper::luaAdd: checkModifiable (always true here, the request
// headers have not continued), onHeadersModified, then addCopy of key and value as C strings
// (luaL_checkstring: a NUL ends them), a new entry each call.
func luaHeaderAdd(L *lua.LState) int {
	s := checkStream(L)
	k, v := cString(L.CheckString(2)), cString(L.CheckString(3))
	s.modified()
	s.r.Header.Add(strings.ToLower(k), v)
	return 0
}

func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

func checkSSL(L *lua.LState) *http.Request { return checkStream(L).r }

func luaPeerPresented(L *lua.LState) int {
	L.Push(lua.LBool(len(checkSSL(L).TLS.PeerCertificates) > 0))
	return 1
}

// luaPeerValidated is peerCertificateValidated(): the validation status is set only by the
// certificate verify callback, which a resumed TLS session does not run, so it is false there.
func luaPeerValidated(L *lua.LState) int {
	cs := checkSSL(L).TLS
	L.Push(lua.LBool(len(cs.VerifiedChains) > 0 && !cs.DidResume))
	return 1
}

func luaSubjectPeer(L *lua.LState) int {
	cs := checkSSL(L).TLS
	if len(cs.PeerCertificates) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	L.Push(lua.LString(rfc2253(cs.PeerCertificates[0].RawSubject)))
	return 1
}

// luaSHA256Peer is sha256PeerCertificateDigest(): Hex::encode (lowercase) of the leaf's DER.
func luaSHA256Peer(L *lua.LState) int {
	cs := checkSSL(L).TLS
	if len(cs.PeerCertificates) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	L.Push(lua.LString(hex.EncodeToString(sum[:])))
	return 1
}

// luaRespond is StreamHandleWrapper::luaRespond: the headers table (string keys; a value is a
// string, a number, or a table of them for several entries), :status a number in 200..599 (else a
// Lua error: the request continues), the optional body; then DecoderCallbacks::respond, which is
// sendLocalReply with the table's headers added (modify_headers) and details "lua_response": no
// response flag, so no local_reply_config mapper with a flag filter matches; a body gets its
// content-length and text/plain only if no content-type was given (Utility::prepareLocalReply); an
// empty body drops both. The script then ends (lua_yield, never resumed).
func luaRespond(L *lua.LState) int {
	s := checkStream(L)
	tbl := L.CheckTable(2)
	body := ""
	if L.GetTop() >= 3 && L.Get(3) != lua.LNil {
		body = L.CheckString(3)
	}
	h := http.Header{}
	var bad error
	tbl.ForEach(func(k, v lua.LValue) {
		ks, ok := k.(lua.LString)
		if !ok {
			bad = errors.New("header key: expected string")
			return
		}
		add := func(v lua.LValue) {
			switch v.(type) {
			case lua.LString, lua.LNumber:
				h[strings.ToLower(string(ks))] = append(h[strings.ToLower(string(ks))], v.String())
			default:
				bad = errors.New("header value: expected string")
			}
		}
		if t, ok := v.(*lua.LTable); ok {
			t.ForEach(func(_, e lua.LValue) { add(e) })
		} else {
			add(v)
		}
	})
	if bad != nil {
		L.RaiseError("%v", bad)
	}
	code, err := strconv.ParseUint(strings.Join(h[":status"], ","), 10, 64)
	if err != nil || code < 200 || code >= 600 {
		L.RaiseError(":status must be between 200-599")
	}
	delete(h, ":status")
	out := s.w.Header()
	for k, vs := range h {
		for _, v := range vs {
			out.Add(k, v)
		}
	}
	if body != "" {
		out.Set("Content-Length", strconv.Itoa(len(body)))
		if out.Get("Content-Type") == "" {
			out.Set("Content-Type", "text/plain")
		}
	} else {
		out.Del("Content-Length")
		out.Del("Content-Type")
	}
	s.w.WriteHeader(int(code))
	if s.r.Method != http.MethodHead {
		_, _ = s.w.Write([]byte(body))
	}
	s.responded = true
	return L.Yield()
}

// LuaFilter is the stand-in's envoy.filters.http.lua for in-process tests of a script (the
// differential identity test): the same code the listener's filter runs.
type LuaFilter struct{ f *luaFilter }

// NewLuaFilter compiles code as the filter's default_source_code; logf receives what Envoy would
// log (script errors), prefixed as the stand-in's logs are.
func NewLuaFilter(code string, logf func(string, ...any)) (*LuaFilter, error) {
	cfg := &luav3.Lua{DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: code}}}
	f, err := newLuaFilter(cfg, func(format string, args ...any) { logf("["+Name+"] "+format, args...) })
	if err != nil {
		return nil, err
	}
	return &LuaFilter{f: f}, nil
}

// OnRequest runs envoy_on_request on r, whose headers it changes in place; r.TLS is the
// downstream connection. It returns true when the script answered (written to w).
func (l *LuaFilter) OnRequest(w http.ResponseWriter, r *http.Request) bool {
	return l.f.onRequest(w, r, func() {})
}
