package xds

import (
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// Filter and transport socket names Envoy registers the typed configs under.
const (
	filterHCM            = "envoy.filters.network.http_connection_manager"
	filterHeaderMutation = "envoy.filters.http.header_mutation"
	filterExtProc        = "envoy.filters.http.ext_proc"
	filterRouter         = "envoy.filters.http.router"
)

// strippedHeaders are removed from every request before any other filter runs, by a filter that does
// not depend on ext_proc: a client must never claim an identity or a refusal marker, also while the
// processor is down (failure_mode_allow); the Lua identity filter after it sets the real ones. The
// routing header is removed earlier still, by the connection manager before it selects a route
// (RouteConfiguration.internal_only_headers, routes.go); it is listed here too so no filter ever
// sees a client's copy. X-Forwarded-Client-Cert is sanitized by the connection manager
// itself (SANITIZE_SET) and removed by the router when it forwards (request_headers_to_remove).
var strippedHeaders = []string{wire.RouteHeader, wire.RemoteUserHeader, wire.RemoteGroupHeader, wire.RemoteUIDHeader, wire.IdentityRefusedHeader}

// noInternalPeers makes no downstream peer "internal", so internal_only_headers are removed from every
// request. The connection manager calls a request internal when
// internal_address_config.isInternalAddress(peer) holds (source/common/http/conn_manager_utility.cc,
// mutateRequestHeaders, with use_remote_address the peer is the final remote address). With
// internal_address_config set, that is: unix_sockets for a pipe peer; membership in cidr_ranges when
// the list is non-empty; otherwise RFC1918/RFC4193 (InternalAddressConfig::isInternalAddress,
// source/extensions/filters/network/http_connection_manager/config.h). Without the field, older
// releases also fell back to RFC1918 unless the runtime guard
// envoy.reloadable_features.explicit_internal_address_config was on (config.cc,
// createInternalAddressConfig; the guard was removed in 1.36.0, changelogs/1.36.0.yaml). So the
// field is always set, with unix_sockets false and ranges that no TCP peer can have: the unspecified
// addresses 0.0.0.0/32 and ::/128.
func noInternalPeers() *hcmv3.HttpConnectionManager_InternalAddressConfig {
	return &hcmv3.HttpConnectionManager_InternalAddressConfig{
		UnixSockets: false,
		CidrRanges: []*corev3.CidrRange{
			{AddressPrefix: "0.0.0.0", PrefixLen: wrapperspb.UInt32(32)},
			{AddressPrefix: "::", PrefixLen: wrapperspb.UInt32(128)},
		},
	}
}

// listener is the one HTTPS listener: TLS, then the connection manager and its filters.
func (tb *translator) listener() (*listenerv3.Listener, error) {
	filters, err := tb.httpFilters()
	if err != nil {
		return nil, err
	}
	hcmAny, err := envoyconf.Pack(tb.connectionManager(filters))
	if err != nil {
		return nil, err
	}
	ts, err := tb.downstreamTLS()
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:    wire.ListenerName,
		Address: envoyconf.SocketAddress(tb.o.ListenAddress, tb.o.ListenPort),
		FilterChains: []*listenerv3.FilterChain{{
			Filters:         []*listenerv3.Filter{{Name: filterHCM, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny}}},
			TransportSocket: ts,
			// A socket that never completes its TLS handshake is closed after this (Envoy arms
			// ServerConnectionImpl::setTransportSocketConnectTimeout at accept and cancels it on
			// Connected, source/common/network/connection_impl.cc and
			// source/common/listener_manager/active_stream_listener_base.cc, newest stored copies).
			// Without it such a socket lives until the connection manager's one-hour idle timeout
			// (request_headers_timeout starts with a stream), so a flood of silent sockets would hold
			// the global connection limit for an hour.
			TransportSocketConnectTimeout: durationpb.New(transportSocketConnectTimeout),
		}},
	}, nil
}

// httpFilters is the connection manager's filter chain: strip what a client must never claim, set
// the identity, ask ext_proc where the request goes, refuse what the identity filter refused, route.
func (tb *translator) httpFilters() ([]*hcmv3.HttpFilter, error) {
	stripAny, err := envoyconf.Pack(stripConfig())
	if err != nil {
		return nil, err
	}
	extProc, err := envoyconf.Pack(tb.extProcFilter())
	if err != nil {
		return nil, err
	}
	router, err := envoyconf.Pack(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	identity, refusal, err := identityFilters(tb.o.ForwardCertificateUID)
	if err != nil {
		return nil, err
	}
	return []*hcmv3.HttpFilter{
		{Name: filterHeaderMutation + ".strip", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: stripAny}},
		identity,
		{Name: filterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: extProc}},
		refusal,
		{Name: filterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}},
	}, nil
}

// stripConfig removes strippedHeaders and every X-Remote-Extra-* header from each request.
func stripConfig() *headermutationv3.HeaderMutation {
	strip := &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{}}
	for _, h := range strippedHeaders {
		strip.Mutations.RequestMutations = append(strip.Mutations.RequestMutations,
			&mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}})
	}
	// X-Remote-Extra-<key> has an open set of names: remove by prefix. HeaderMutation.remove_on_match
	// first shipped in Envoy 1.36.0 (changelogs/1.36.0.yaml); every supported release has it.
	strip.Mutations.RequestMutations = append(strip.Mutations.RequestMutations, &mutationrulesv3.HeaderMutation{
		Action: &mutationrulesv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationrulesv3.HeaderMutation_RemoveOnMatch{
			KeyMatcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: wire.RemoteExtraPrefix}, IgnoreCase: true},
		}},
	})
	return strip
}

// connectionManager is the HTTP connection manager of the listener, with routes from RDS.
func (tb *translator) connectionManager(filters []*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "skewgate",
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: wire.RouteConfigName,
			ConfigSource:    envoyconf.ADSSource(),
		}},
		HttpFilters: filters,
		// exec, attach and port-forward: kubectl upgrades to SPDY/3.1, newer clients to WebSocket.
		// Upgrade types match case-insensitively (http_connection_manager/config.cc looks them up with a
		// case-insensitive comparison).
		UpgradeConfigs: []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}, {UpgradeType: "spdy/3.1"}},
		// The path ext_proc classifies is the path Envoy routes and forwards.
		NormalizePath: wrapperspb.Bool(true),
		MergeSlashes:  true,
		// Watches and exec sessions may be quiet for a long time; the apiserver bounds watches itself.
		StreamIdleTimeout:     durationpb.New(0),
		RequestHeadersTimeout: durationpb.New(10 * time.Second),
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{
			IdleTimeout:                  durationpb.New(time.Hour),
			HeadersWithUnderscoresAction: corev3.HttpProtocolOptions_REJECT_REQUEST,
		},
		Http2ProtocolOptions:  &corev3.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(1000)},
		UseRemoteAddress:      wrapperspb.Bool(true),
		InternalAddressConfig: noInternalPeers(),
		// X-Forwarded-Client-Cert says "this connection presented a verified client certificate" to the
		// route table (the anonymous twins match on its absence), before any filter runs; a client's own
		// copy is dropped (SANITIZE_SET). Its value is Hash=<sha256> alone: with SANITIZE_SET Envoy
		// always adds the peer certificate's digest and adds Cert only when
		// set_current_client_cert_details asks (conn_manager_utility.cc, mutateXfccRequestHeader).
		// Nothing reads the certificate from it any more: the Lua filter reads the connection itself,
		// ext_proc is not shown the header, the router removes it.
		ForwardClientCertDetails:     hcmv3.HttpConnectionManager_SANITIZE_SET,
		ServerHeaderTransformation:   hcmv3.HttpConnectionManager_PASS_THROUGH,
		LocalReplyConfig:             neverSentReply(),
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_KEEP_UNCHANGED,
		StripTrailingHostDot:         true,
	}
}

// downstreamTLS is the listener's TLS: the serving certificate, client certificates requested and
// verified when a client CA is configured, no session resumption.
func (tb *translator) downstreamTLS() (*corev3.TransportSocket, error) {
	common := &tlsv3.CommonTlsContext{
		TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsRef(SecretFrontCert)},
		AlpnProtocols:                  []string{"h2", "http/1.1"},
	}
	if tb.o.ClientCAFile != "" {
		// Requested, verified when presented, not required: token users have no certificate.
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sdsRef(SecretClientCA)}
	}
	// No TLS session resumption: Envoy's peerCertificateValidated(), which the identity filter
	// requires, is set only by the certificate verify callback, and a resumed session does not run
	// it, so every resumed certificate session would be refused. disable_stateful_session_resumption
	// turns the session cache off (SSL_CTX_set_session_cache_mode SSL_SESS_CACHE_OFF), and
	// disable_stateless_session_resumption issues no session tickets (ServerContextImpl,
	// source/common/tls/server_context_impl.cc, stored copies of main). A client then does a full
	// handshake per connection; kubelets and controllers keep theirs open for hours.
	tlsAny, err := envoyconf.Pack(&tlsv3.DownstreamTlsContext{
		CommonTlsContext:                 common,
		RequireClientCertificate:         wrapperspb.Bool(false),
		SessionTicketKeysType:            &tlsv3.DownstreamTlsContext_DisableStatelessSessionResumption{DisableStatelessSessionResumption: true},
		DisableStatefulSessionResumption: true,
	})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: envoyconf.TransportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}, nil
}

// identityHeadersPattern matches (fully, lower-case as the checker compares) every header the
// identity filter owns: X-Remote-* and its refusal marker.
const identityHeadersPattern = `x-remote-.*|` + wire.IdentityRefusedHeader

// transportSocketConnectTimeout bounds a client's TLS handshake: generous for a slow client, short
// against silent sockets.
const transportSocketConnectTimeout = 10 * time.Second

// neverSentFlags are Envoy's response flags for local replies to requests that provably never reached
// an apiserver: no healthy upstream (UH), upstream connection failure (UF), no cluster found (NC).
var neverSentFlags = []string{"UH", "UF", "NC"}

// neverSentReply makes those replies look like an apiserver's own 503: a metav1.Status body and
// Retry-After, so clients retry them (client-go does, for writes too). Nothing that may have reached
// an apiserver is touched: Envoy's replies for a reset after the request was sent keep their form.
func neverSentReply() *hcmv3.LocalReplyConfig {
	body, _ := structpb.NewStruct(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
		"reason": "ServiceUnavailable", "code": 503,
		"message": "no apiserver could take the request (%RESPONSE_CODE_DETAILS%); it was not sent, retry",
	})
	return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{{
		Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
			ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: neverSentFlags},
		}},
		StatusCode: wrapperspb.UInt32(503),
		BodyFormatOverride: &corev3.SubstitutionFormatString{
			Format:      &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: body},
			ContentType: "application/json",
		},
		HeadersToAdd: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: "retry-after", Value: "1"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}}}
}

// extProcFilter is the ext_proc filter: request headers, fail open to the default route, and never
// show the processor a credential (authorization, proxy-authorization, cookie are not forwarded).
//
// allow_mode_override lets the processor ask for the response headers of one request (discovery
// paths, answered from the apiserver's status): source/extensions/filters/http/ext_proc/ext_proc.cc (Filter::onReceiveMessage) applies a
// ProcessingResponse.mode_override only when allow_mode_override is set, while it waits for a headers
// response, and (since allowed_override_modes exists) only when that list is empty or holds the mode;
// otherwise the override is ignored and the filter's processing_mode stays.
func (tb *translator) extProcFilter() *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: wire.ExtProcCluster}},
		},
		FailureModeAllow:  true,
		AllowModeOverride: true,
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SKIP,
			RequestBodyMode:     extprocv3.ProcessingMode_NONE,
			ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		MessageTimeout: durationpb.New(tb.o.ExtProcTimeout),
		StatPrefix:     "skewgate",
		ForwardRules: &extprocv3.HeaderForwardingRules{DisallowedHeaders: &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{
			{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "authorization"}, IgnoreCase: true},
			{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "proxy-authorization"}, IgnoreCase: true},
			{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "cookie"}, IgnoreCase: true},
			// Nor the client certificate: identity is the Lua filter's, anonymity comes from the route.
			{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: wire.ForwardedCertHeader}, IgnoreCase: true},
		}}},
		// The processor may set our routing header, nothing Envoy owns, and no identity header: a set
		// or a removal of a name matching identityHeadersPattern fails the response (Checker::isAllowed
		// tests disallow_expression first, source/extensions/filters/common/mutation_rules/
		// mutation_rules.cc; MutationUtils::applyHeaderMutations checks removals and sets alike,
		// mutation_utils.cc, stored copies of main).
		MutationRules: &mutationrulesv3.HeaderMutationRules{
			DisallowSystem:     wrapperspb.Bool(true),
			DisallowIsError:    wrapperspb.Bool(true),
			DisallowExpression: &matcherv3.RegexMatcher{Regex: identityHeadersPattern},
		},
	}
}
