package dataplane

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// localError is a reply the data plane itself makes, with its response flag.
type localError struct {
	code          int
	flag, details string
}

func (e *localError) Error() string { return e.details }

var errNoHealthyUpstream = errors.New("no healthy upstream")

// isUpgrade: an HTTP/1.1 request with Connection: upgrade and an Upgrade header.
func isUpgrade(r *http.Request) bool {
	if r.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// upgradeAllowed: the HCM's upgrade_configs name the type (case-insensitively) and the route's
// upgrade_configs, if they name it, do not disable it.
func upgradeAllowed(ch *chain, ra *routev3.RouteAction, typ string) bool {
	typ = strings.ToLower(typ)
	for _, u := range ra.GetUpgradeConfigs() {
		if strings.EqualFold(u.UpgradeType, typ) && u.Enabled != nil {
			return u.Enabled.Value
		}
	}
	return ch.upgrades[typ]
}

// finalizeRequestHeaders applies request_headers_to_remove, then request_headers_to_add, of the
// route, the virtual host and the route configuration, in that order (the route configuration's
// last, so it wins), when the router forwards (RouteEntryImplBase::finalizeRequestHeaders with
// most_specific_header_mutations_wins false; HeaderParser removes before it adds).
func finalizeRequestHeaders(h http.Header, rc *routev3.RouteConfiguration, e *routeEntry) {
	apply := func(remove []string, add []*corev3.HeaderValueOption) {
		for _, k := range remove {
			h.Del(k)
		}
		for _, o := range add {
			setHeader(h, o.Header.Key, o.Header.Value, o.AppendAction)
		}
	}
	apply(e.route.RequestHeadersToRemove, e.route.RequestHeadersToAdd)
	apply(e.vhost.RequestHeadersToRemove, e.vhost.RequestHeadersToAdd)
	apply(rc.RequestHeadersToRemove, rc.RequestHeadersToAdd)
}

// forward is the router filter: the cluster of the cached route entry (NC with
// cluster_not_found_response_code if it does not exist or is still warming, source/common/router/
// router.cc), upgrades, header finalization, host choice with retries, and the ext_proc
// response phase of the streams still open.
func (d *DataPlane) forward(w http.ResponseWriter, r *http.Request, ch *chain, e *routeEntry, streams []*extProcStream) {
	upgrade := isUpgrade(r)
	// Everything after an upgrade request's headers is upgrade payload, held until the upstream
	// accepts with 101 (runtime guard http_pause_generic_upgrade_request_body,
	// source/common/router/upstream_request.cc); on any other answer it is never parsed as a
	// request: the connection closes after the answer.
	refused := func() {
		if upgrade && r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
	}
	refused()
	if e == nil {
		localReply(w, ch, http.StatusNotFound, "NR", "route_not_found")
		return
	}
	if e.route.GetDirectResponse() != nil {
		directResponse(w, r, e.route) // pathmatch.go
		return
	}
	ra := e.route.GetRoute()
	c := d.clusters.get(e.cluster)
	if c == nil {
		code := map[routev3.RouteAction_ClusterNotFoundResponseCode]int{
			routev3.RouteAction_SERVICE_UNAVAILABLE: 503, routev3.RouteAction_NOT_FOUND: 404, routev3.RouteAction_INTERNAL_SERVER_ERROR: 500,
		}[ra.ClusterNotFoundResponseCode]
		localReply(w, ch, code, "NC", "cluster_not_found")
		return
	}
	if upgrade && !upgradeAllowed(ch, ra, r.Header.Get("Upgrade")) {
		localReply(w, ch, http.StatusForbidden, "", "upgrade_failed")
		return
	}
	finalizeRequestHeaders(r.Header, d.routeConfig(ch.routeName), e)
	if r.Header.Get("X-Request-Id") == "" { // generate_request_id defaults to true
		var b [16]byte
		rand.Read(b[:])
		r.Header.Set("X-Request-Id", hex.EncodeToString(b[:]))
	}
	policy := ra.GetRetryPolicy()
	if policy == nil {
		policy = e.vhost.GetRetryPolicy()
	}
	rt := &attempts{d: d, c: c, policy: policy}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", "upstream" // set per host by attempts
			pr.Out.Host = pr.In.Host                                 // :authority is forwarded unchanged
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		},
		Transport:     rt,
		FlushInterval: -1, // stream: watches and logs (route timeout 0s)
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				w.Header().Del("Connection") // the 101 carries the upstream's Connection: upgrade
			}
			for i := len(streams) - 1; i >= 0; i-- { // encoder filters run in reverse order
				if err := d.extProcResponse(streams[i], resp); err != nil {
					return err
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			refused()
			var le *localError
			switch {
			case errors.As(err, &le):
				localReply(w, ch, le.code, le.flag, le.details)
			case errors.Is(err, errNoHealthyUpstream):
				localReply(w, ch, http.StatusServiceUnavailable, "UH", "no_healthy_upstream")
			case connectFailure(err):
				localReply(w, ch, http.StatusServiceUnavailable, "UF", "upstream_reset_before_response_started{connection_failure}")
			default:
				// The request may have reached the apiserver: no flag a mapper matches.
				localReply(w, ch, http.StatusServiceUnavailable, "UR", "upstream_reset_before_response_started{remote_reset}")
			}
		},
		ErrorLog: discardLog,
	}
	proxy.ServeHTTP(w, r)
}

// extProcResponse runs the response_headers phase on an upstream response: header mutation, or an
// ImmediateResponse that replaces the upstream's answer; fail-open keeps the upstream's answer.
func (d *DataPlane) extProcResponse(s *extProcStream, resp *http.Response) error {
	if resp.StatusCode < 200 || !s.sendResponseHeaders() {
		return nil
	}
	pseudo := [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}
	pr, err := s.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(pseudo, resp.Header, s.cfg.GetForwardRules()), EndOfStream: resp.ContentLength == 0},
	}})
	s.close()
	if err != nil {
		if s.cfg.FailureModeAllow {
			d.logf("ext_proc failed in the response phase, failing open: %v", err)
			return nil
		}
		if errors.Is(err, errMessageTimeout) {
			return &localError{code: http.StatusGatewayTimeout, details: "ext_proc_error: " + err.Error()}
		}
		return &localError{code: http.StatusInternalServerError, details: "ext_proc_error: " + err.Error()}
	}
	switch pr.Response.(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		ir := pr.GetImmediateResponse()
		h := http.Header{}
		if m := ir.GetHeaders(); m != nil && applyMutation(h, m, s.cfg.GetMutationRules()) != nil {
			h = http.Header{}
		}
		if len(ir.Body) > 0 && h.Get("Content-Type") == "" {
			h.Set("Content-Type", "text/plain")
		}
		resp.Body.Close()
		resp.StatusCode = immediateStatus(ir)
		resp.Status = strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
		resp.Header = h
		resp.Header.Set("Content-Length", strconv.Itoa(len(ir.Body)))
		resp.ContentLength = int64(len(ir.Body))
		resp.Body = io.NopCloser(strings.NewReader(string(ir.Body)))
		return nil
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		if m := pr.GetResponseHeaders().GetResponse().GetHeaderMutation(); m != nil {
			if err := applyMutation(resp.Header, m, s.cfg.GetMutationRules()); err != nil {
				return &localError{code: http.StatusInternalServerError, details: "ext_proc_error: " + err.Error()}
			}
		}
		return nil
	}
	if s.cfg.FailureModeAllow {
		return nil
	}
	return &localError{code: http.StatusInternalServerError, details: "ext_proc_error: spurious response"}
}

// localReply answers a request Envoy itself ends, applying the connection manager's
// local_reply_config: the first mapper whose response_flag_filter holds the reply's flag rewrites
// status, headers and body (body_format_override json_format, %RESPONSE_CODE_DETAILS% substituted).
func localReply(w http.ResponseWriter, ch *chain, code int, flag, details string) {
	if ch != nil {
		for _, m := range ch.hcm.GetLocalReplyConfig().GetMappers() {
			if flag == "" || !slices.Contains(m.GetFilter().GetResponseFlagFilter().GetFlags(), flag) {
				continue
			}
			if m.StatusCode != nil {
				code = int(m.StatusCode.Value)
			}
			for _, o := range m.HeadersToAdd {
				setHeader(w.Header(), o.Header.Key, o.Header.Value, o.AppendAction)
			}
			if jf := m.GetBodyFormatOverride().GetJsonFormat(); jf != nil {
				body, _ := json.Marshal(jf.AsMap())
				body = []byte(strings.ReplaceAll(string(body), "%RESPONSE_CODE_DETAILS%", details))
				w.Header().Set("Content-Type", m.GetBodyFormatOverride().GetContentType())
				w.WriteHeader(code)
				w.Write(body)
				return
			}
			break
		}
	}
	http.Error(w, details, code)
}
