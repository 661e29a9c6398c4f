package dataplane

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// serveHTTP is one downstream request through the connection manager: codec checks, path
// normalization, request header mutation (XFF, internal-only headers, XFCC), the route picked
// before any filter runs, then the HTTP filters in order.
func (d *DataPlane) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ch := d.chain.Load()
	var rc *routev3.RouteConfiguration
	if ch != nil {
		rc = d.routeConfig(ch.routeName)
	}
	if rc == nil {
		http.Error(w, "no listener config", http.StatusServiceUnavailable)
		return
	}
	if !rejectUnderscores(w, r, ch.hcm) {
		return
	}
	// The :path as the client sent it (RequestURI), normalized as the connection manager does
	// (path.go); an invalid one is answered 400 before anything else sees it.
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") {
		path = r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
	}
	path, ok := normalizeRequestPath(path, ch.hcm)
	if !ok {
		localReply(w, ch, http.StatusBadRequest, "", "path_normalization_failed")
		return
	}
	rawPath, rawQuery, _ := strings.Cut(path, "?")
	r.URL.RawPath, r.URL.Path, r.URL.RawQuery = rawPath, unescapeOr(rawPath), rawQuery
	d.mutateRequestHeaders(r, ch, rc.GetInternalOnlyHeaders())
	view := &requestView{method: r.Method, path: path, authority: r.Host, scheme: "https", header: r.Header,
		perValue: matchHeadersIndividually(d.cfg.EnvoyVersion)}
	cache := &routeCache{rc: rc, view: view}
	cache.route() // refreshCachedRoute: the route is chosen before the first filter
	var streams []*extProcStream
	defer func() {
		for _, s := range streams {
			s.close()
		}
	}()
	for _, f := range ch.filters {
		switch {
		case f.mutation != nil:
			applyHeaderMutationFilter(r.Header, f.mutation)
			// The filter then looks up its per-route config: route() re-matches if the cache
			// was cleared (header_mutation.cc decodeHeaders). It never clears the cache itself.
			cache.route()
		case f.lua != nil:
			// onHeadersModified clears the route cache unless clear_route_cache is false; the
			// next filter's route() re-matches.
			if f.lua.onRequest(w, r, func() {
				if f.lua.clearRouteCache {
					cache.clear()
				}
			}) {
				return
			}
		case f.extProc != nil:
			s, done := d.extProcRequest(w, r, f, cache, view)
			if done {
				return
			}
			if s != nil {
				streams = append(streams, s)
			}
		case f.router:
			d.forward(w, r, ch, cache.route(), streams)
			return
		}
	}
}

// applyHeaderMutationFilter runs a header_mutation filter's request mutations: remove,
// remove_on_match (key matcher on the header name), append with its append_action
// (source/extensions/filters/http/header_mutation, HeaderMutations::mutateRequestHeaders).
func applyHeaderMutationFilter(h http.Header, m *headermutationv3.HeaderMutation) {
	for _, mu := range m.GetMutations().GetRequestMutations() {
		if k := mu.GetRemove(); k != "" {
			h.Del(k)
		}
		if rm := mu.GetRemoveOnMatch(); rm != nil {
			for k := range h {
				if stringMatchAny([]*matcherv3.StringMatcher{rm.KeyMatcher}, strings.ToLower(k)) {
					h.Del(k)
				}
			}
		}
		if a := mu.GetAppend(); a != nil {
			setHeader(h, a.Header.Key, a.Header.Value, a.AppendAction)
		}
	}
}

// extProcRequest runs an ext_proc filter's request_headers phase. It returns the stream when the
// response_headers phase is still to run, and done when the request was answered here.
// Fail-open (failure_mode_allow) on a gRPC error or message timeout leaves the request as it was,
// on the route already chosen; without it Envoy answers status_on_error (default 500) for a gRPC
// error and 504 for a message timeout (Filter::onGrpcError / onMessageTimeout; releases before
// status_on_error answered 500 for both).
func (d *DataPlane) extProcRequest(w http.ResponseWriter, r *http.Request, f filter, cache *routeCache, v *requestView) (*extProcStream, bool) {
	pr := perRoute(cache.route(), f.name)
	if pr.GetDisabled() {
		return nil, false
	}
	s, err := d.openExtProc(r.Context(), f.extProc, pr)
	if err != nil {
		return nil, d.extProcFailed(w, r, f.extProc, err)
	}
	if s.mode.GetRequestHeaderMode() == extprocfilterv3.ProcessingMode_SKIP {
		if s.sendResponseHeaders() {
			return s, false
		}
		s.close()
		return nil, false
	}
	pseudo := [][2]string{{":authority", v.authority}, {":path", v.path}, {":method", v.method}, {":scheme", v.scheme}}
	resp, err := s.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(pseudo, r.Header, f.extProc.GetForwardRules()),
			EndOfStream: r.Body == nil || r.Body == http.NoBody},
	}})
	if err != nil {
		s.close()
		return nil, d.extProcFailed(w, r, f.extProc, err)
	}
	switch resp.Response.(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		s.close()
		sendImmediate(w, resp.GetImmediateResponse(), f.extProc)
		return nil, true
	case *extprocv3.ProcessingResponse_RequestHeaders:
	default:
		// A response to a message not sent: spurious; the stream is ignored from now on, or the
		// request fails when failing closed.
		s.close()
		return nil, d.extProcFailed(w, r, f.extProc, errors.New("spurious ext_proc response"))
	}
	s.overrideMode(resp)
	common := resp.GetRequestHeaders().GetResponse()
	if hm := common.GetHeaderMutation(); hm != nil {
		if err := applyMutation(r.Header, hm, f.extProc.GetMutationRules()); err != nil {
			s.close()
			d.logf("ext_proc header mutation rejected for %s %s: %v", r.Method, v.path, err)
			localReply(w, nil, http.StatusInternalServerError, "", "ext_proc_error: "+err.Error())
			return nil, true
		}
		// DecodingProcessorState::clearRouteCache: only a response with a header mutation may
		// clear the cache; DEFAULT clears it when clear_route_cache is set, CLEAR always,
		// RETAIN never; disable_clear_route_cache wins.
		switch {
		case f.extProc.GetDisableClearRouteCache():
		case f.extProc.GetRouteCacheAction() == extprocfilterv3.ExternalProcessor_CLEAR,
			f.extProc.GetRouteCacheAction() == extprocfilterv3.ExternalProcessor_DEFAULT && common.ClearRouteCache:
			cache.clear()
		}
	}
	if s.sendResponseHeaders() {
		return s, false
	}
	s.close()
	return nil, false
}

// extProcFailed handles a failed stream; it returns whether the request was answered.
func (d *DataPlane) extProcFailed(w http.ResponseWriter, r *http.Request, cfg *extprocfilterv3.ExternalProcessor, err error) bool {
	if cfg.FailureModeAllow {
		d.logf("ext_proc failed, failing open for %s %s: %v", r.Method, r.URL.Path, err)
		return false
	}
	code := http.StatusInternalServerError
	if s := cfg.GetStatusOnError(); s != nil {
		code = int(s.Code) // status_on_error, for gRPC errors
	}
	if errors.Is(err, errMessageTimeout) {
		code = http.StatusGatewayTimeout // "_per-message_timeout_exceeded"
	}
	localReply(w, nil, code, "", "ext_proc_error: "+err.Error())
	return true
}

// sendImmediate answers with an ImmediateResponse: status (200 if unset or < 200), headers through
// the mutation rules, body; content-type text/plain for a body without one (sendLocalReply).
func sendImmediate(w http.ResponseWriter, ir *extprocv3.ImmediateResponse, cfg *extprocfilterv3.ExternalProcessor) {
	h := http.Header{}
	if m := ir.GetHeaders(); m != nil {
		if err := applyMutation(h, m, cfg.GetMutationRules()); err != nil {
			h = http.Header{}
		}
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	if len(ir.Body) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/plain")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(ir.Body)))
	w.WriteHeader(immediateStatus(ir))
	w.Write(ir.Body)
}
