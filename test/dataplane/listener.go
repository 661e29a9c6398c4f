package dataplane

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// filter is one HTTP filter of the chain, in order.
type filter struct {
	name     string
	mutation *headermutationv3.HeaderMutation
	extProc  *extProcFilter
	router   bool
}

// chain is the listener's HTTP connection manager as the request path needs it.
type chain struct {
	hcm      *hcmv3.HttpConnectionManager
	filters  []filter
	upgrades map[string]bool
}

// downstreamTLS builds the server TLS config of a DownstreamTlsContext: certificate, ALPN, and when a
// validation context is set, client certificates requested and verified if presented
// (require_client_certificate false). Files are read at each handshake (see secretStore).
func downstreamTLS(l *listenerv3.Listener, secrets *secretStore) (*tls.Config, error) {
	if len(l.FilterChains) != 1 || l.FilterChains[0].TransportSocket == nil {
		return nil, errors.New("want exactly one filter chain with TLS")
	}
	var ctx tlsv3.DownstreamTlsContext
	if err := l.FilterChains[0].TransportSocket.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return nil, err
	}
	common := ctx.CommonTlsContext
	cert := certSource(common, secrets)
	pool, _, verify := caSource(common, secrets)
	require := ctx.GetRequireClientCertificate().GetValue()
	return &tls.Config{NextProtos: common.AlpnProtocols, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := cert()
		if err != nil || c == nil {
			return nil, fmt.Errorf("front certificate: %v", err)
		}
		cfg := &tls.Config{NextProtos: common.AlpnProtocols, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*c}}
		if verify {
			if cfg.ClientCAs, err = pool(); err != nil {
				return nil, err
			}
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
			if require {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			}
		}
		return cfg, nil
	}}, nil
}

func (d *DataPlane) buildChain(l *listenerv3.Listener) (*chain, error) {
	fs := l.FilterChains[0].Filters
	if len(fs) != 1 {
		return nil, errors.New("want one network filter (http_connection_manager)")
	}
	var hcm hcmv3.HttpConnectionManager
	if err := fs[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, err
	}
	ch := &chain{hcm: &hcm, upgrades: map[string]bool{}}
	for _, u := range hcm.UpgradeConfigs {
		ch.upgrades[strings.ToLower(u.UpgradeType)] = true
	}
	for _, hf := range hcm.HttpFilters {
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("filter %s: %w", hf.Name, err)
		}
		switch cfg := m.(type) {
		case *headermutationv3.HeaderMutation:
			ch.filters = append(ch.filters, filter{mutation: cfg})
		case *extprocfilterv3.ExternalProcessor:
			name := cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName()
			c := d.clusters.get(name)
			if c == nil {
				return nil, fmt.Errorf("ext_proc cluster %q unknown", name)
			}
			conn, err := dialProcessor(c)
			if err != nil {
				return nil, err
			}
			ch.filters = append(ch.filters, filter{name: hf.Name, extProc: &extProcFilter{cfg: cfg, conn: conn, client: newProcessorClient(conn)}})
		case *routerv3.Router:
			ch.filters = append(ch.filters, filter{router: true})
		default:
			return nil, fmt.Errorf("filter %s: %s is not supported by the test data plane", hf.Name, proto.MessageName(m))
		}
	}
	if len(ch.filters) == 0 || !ch.filters[len(ch.filters)-1].router {
		return nil, errors.New("the last filter must be the router")
	}
	return ch, nil
}

// applyHeaderMutationFilter runs a header_mutation filter's request mutations: remove, remove_on_match
// (key matcher on the header name), append.
func applyHeaderMutationFilter(h http.Header, m *headermutationv3.HeaderMutation) {
	for _, mu := range m.GetMutations().GetRequestMutations() {
		if k := mu.GetRemove(); k != "" {
			h.Del(k)
		}
		if rm := mu.GetRemoveOnMatch(); rm != nil {
			km := rm.KeyMatcher
			for k := range h {
				name := strings.ToLower(k)
				if p := km.GetPrefix(); p != "" && strings.HasPrefix(name, strings.ToLower(p)) {
					h.Del(k)
				} else if e := km.GetExact(); e != "" && strings.EqualFold(name, e) {
					h.Del(k)
				}
			}
		}
		if a := mu.GetAppend(); a != nil {
			setHeader(h, a.Header.Key, a.Header.Value, a.AppendAction)
		}
	}
}

func perRouteMetadata(route *routev3.Route, filterName string) []string {
	a, ok := route.GetTypedPerFilterConfig()[filterName]
	if !ok {
		return nil
	}
	var pr extprocfilterv3.ExtProcPerRoute
	if a.UnmarshalTo(&pr) != nil {
		return nil
	}
	var kv []string
	for _, h := range pr.GetOverrides().GetGrpcInitialMetadata() {
		kv = append(kv, h.Key, h.Value)
	}
	return kv
}

// urlEncodePEM escapes a PEM block the way Envoy writes the XFCC Cert field
// (Ssl::ConnectionInfo::urlEncodedPemEncodedPeerCertificate).
func urlEncodePEM(p []byte) string {
	return strings.NewReplacer("\n", "%0A", " ", "%20", "+", "%2B", "/", "%2F", "=", "%3D").Replace(string(p))
}

func (d *DataPlane) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ch := d.chain.Load()
	if ch == nil {
		http.Error(w, "no listener config", http.StatusServiceUnavailable)
		return
	}
	hcm := ch.hcm
	// headers_with_underscores_action REJECT_REQUEST: 400.
	if hcm.GetCommonHttpProtocolOptions().GetHeadersWithUnderscoresAction() == 2 {
		for k := range r.Header {
			if strings.Contains(k, "_") {
				http.Error(w, "Bad Request", http.StatusBadRequest)
				return
			}
		}
	}
	rawPath := r.URL.EscapedPath()
	if hcm.GetNormalizePath().GetValue() {
		rawPath = normalizePath(rawPath, hcm.MergeSlashes)
	}
	r.URL.RawPath, r.URL.Path = rawPath, unescapeOr(rawPath)
	path := rawPath
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	// forward_client_cert_details SANITIZE_SET: drop the client's header; set ours for verified
	// client certificates (Cert: the URL-encoded PEM, Hash: SHA-256 of the DER).
	if hcm.ForwardClientCertDetails == hcmv3.HttpConnectionManager_SANITIZE_SET {
		r.Header.Del("X-Forwarded-Client-Cert")
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			leaf := r.TLS.PeerCertificates[0]
			sum := sha256.Sum256(leaf.Raw)
			v := "Hash=" + hex.EncodeToString(sum[:])
			if hcm.GetSetCurrentClientCertDetails().GetCert() {
				v += `;Cert="` + urlEncodePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})) + `"`
			}
			r.Header.Set("X-Forwarded-Client-Cert", v)
		}
	}
	// use_remote_address: the downstream address becomes X-Forwarded-For.
	if hcm.GetUseRemoteAddress().GetValue() {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			r.Header.Set("X-Forwarded-For", host)
		}
	}
	view := &requestView{method: r.Method, path: path, authority: r.Host, scheme: "https", header: r.Header}
	// The route is chosen when the headers arrive, before any filter runs; a filter that changes a
	// header the route depends on must clear the route cache (envoy#31241).
	route := matchRoute(d.routes.Load(), view)
	for _, f := range ch.filters {
		switch {
		case f.mutation != nil:
			applyHeaderMutationFilter(r.Header, f.mutation)
		case f.extProc != nil:
			// A per-route override (typed_per_filter_config under the filter's name) of the route
			// chosen so far adds gRPC initial metadata to the stream.
			resp, err := f.extProc.call(r.Context(), view, perRouteMetadata(route, f.name))
			if err != nil {
				if f.extProc.cfg.FailureModeAllow {
					// failure_mode_allow: the request goes on unprocessed, on the route chosen so far.
					d.cfg.Logf("dataplane: ext_proc failed, failing open for %s %s: %v", r.Method, path, err)
					continue
				}
				http.Error(w, "ext_proc failed", http.StatusInternalServerError)
				return
			}
			if ir := resp.GetImmediateResponse(); ir != nil {
				for _, o := range ir.GetHeaders().GetSetHeaders() {
					setHeader(w.Header(), o.Header.Key, string(o.Header.RawValue), o.AppendAction)
				}
				w.WriteHeader(int(ir.GetStatus().GetCode()))
				w.Write(ir.Body)
				return
			}
			common := resp.GetRequestHeaders().GetResponse()
			if m := common.GetHeaderMutation(); m != nil {
				rules := f.extProc.cfg.GetMutationRules().GetDisallowSystem().GetValue()
				if err := applyMutation(r.Header, m, rules); err != nil {
					if !f.extProc.cfg.FailureModeAllow {
						http.Error(w, "ext_proc mutation rejected", http.StatusInternalServerError)
						return
					}
				}
				if common.ClearRouteCache {
					route = matchRoute(d.routes.Load(), view)
				}
			}
		case f.router:
			d.forward(w, r, ch, route)
			return
		}
	}
}

func (d *DataPlane) forward(w http.ResponseWriter, r *http.Request, ch *chain, route *routev3.Route) {
	if route.GetDirectResponse() != nil {
		directResponse(w, r, route) // pathmatch.go
		return
	}
	if route == nil || route.GetRoute() == nil {
		w.WriteHeader(http.StatusNotFound) // Envoy: no route matched (NR)
		return
	}
	ra := route.GetRoute()
	name := ra.GetCluster()
	if hdr := ra.GetClusterHeader(); hdr != "" {
		name = r.Header.Get(hdr)
	}
	c := d.clusters.get(name)
	if c == nil {
		// cluster_not_found_response_code: SERVICE_UNAVAILABLE (default) 503, NOT_FOUND 404,
		// INTERNAL_SERVER_ERROR 500.
		code := map[routev3.RouteAction_ClusterNotFoundResponseCode]int{0: 503, 1: 404, 2: 500}[ra.ClusterNotFoundResponseCode]
		ch.localReply(w, code, "NC", "cluster_not_found")
		return
	}
	if up := r.Header.Get("Upgrade"); up != "" && !ch.upgrades[strings.ToLower(up)] {
		http.Error(w, "upgrade not allowed", http.StatusForbidden)
		return
	}
	rt := &retrying{c: c, policy: ra.RetryPolicy}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = "upstream" // replaced per host by retrying
			pr.Out.Host = pr.In.Host     // :authority is forwarded unchanged
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		},
		Transport:     rt,
		FlushInterval: -1, // stream: watches and logs (route timeout 0s)
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			switch {
			case errors.Is(err, errNoHealthyUpstream):
				ch.localReply(w, http.StatusServiceUnavailable, "UH", "no_healthy_upstream")
			case connectFailure(err):
				ch.localReply(w, http.StatusServiceUnavailable, "UF", "upstream_reset_before_response_started{connection_failure}")
			default:
				// The request may have reached the apiserver: no flag a mapper matches.
				ch.localReply(w, http.StatusServiceUnavailable, "", "upstream connect error or disconnect/reset before headers: "+err.Error())
			}
		},
	}
	proxy.ServeHTTP(w, r)
}

var errNoHealthyUpstream = errors.New("no healthy upstream")

// localReply answers a request Envoy itself ends, applying the connection manager's
// local_reply_config: the first mapper whose response_flag_filter holds the reply's flag rewrites
// status, headers and body (body_format_override json_format, %RESPONSE_CODE_DETAILS% substituted).
func (ch *chain) localReply(w http.ResponseWriter, code int, flag, details string) {
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
		http.Error(w, details, code)
		return
	}
	http.Error(w, details, code)
}

// retrying picks a host per attempt and retries connect failures when the route's retry policy
// allows (retry_on connect-failure, num_retries, previous_hosts predicate).
type retrying struct {
	c      *cluster
	policy *routev3.RetryPolicy
}

func (rt *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	tries := 1
	if rt.policy != nil && strings.Contains(rt.policy.RetryOn, "connect-failure") {
		tries += int(rt.policy.GetNumRetries().GetValue())
	}
	tried := map[*host]bool{}
	var lastErr error = errNoHealthyUpstream
	for range tries {
		h := rt.c.pick(tried)
		if h == nil {
			return nil, lastErr
		}
		tried[h] = true
		out := req.Clone(req.Context())
		out.URL.Host = h.addr
		h.active.Add(1)
		resp, err := rt.c.transport.RoundTrip(out)
		if err == nil {
			resp.Body = &countedBody{ReadCloser: resp.Body, h: h}
			return resp, nil
		}
		h.active.Add(-1)
		lastErr = err
		if !connectFailure(err) {
			return nil, err
		}
	}
	return nil, lastErr
}

// countedBody ends a host's active request when the response is done; a 101 body is also a writer.
type countedBody struct {
	io.ReadCloser
	h    *host
	done bool
}

func (b *countedBody) Close() error {
	if !b.done {
		b.done = true
		b.h.active.Add(-1)
	}
	return b.ReadCloser.Close()
}

func (b *countedBody) Write(p []byte) (int, error) {
	if w, ok := b.ReadCloser.(io.Writer); ok {
		return w.Write(p)
	}
	return 0, errors.New("not an upgraded connection")
}

// connectFailure: the request never reached the upstream (dial or TLS handshake failed).
func connectFailure(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var cv *tls.CertificateVerificationError
	return errors.As(err, &cv)
}
