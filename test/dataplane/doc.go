// Package dataplane is a small HTTP data plane for tests and the local demo on machines where no
// Envoy binary can be installed. It is never shipped as part of skewgate.
//
// It subscribes to skewgate's xDS server over ADS like an Envoy (clusters, then listeners, then
// routes; every response ACKed or NACKed) and implements Envoy's documented behaviour for exactly the
// resources skewgate serves, and nothing else:
//
//   - listener: TLS with the configured certificate, client certificates requested and verified when a
//     validation context is set (DownstreamTlsContext), ALPN h2 and http/1.1;
//   - HTTP connection manager: normalize_path and merge_slashes, headers_with_underscores_action,
//     use_remote_address, forward_client_cert_details SANITIZE_SET with the URL-encoded PEM, the route
//     chosen before the filters run and re-chosen only when a filter clears the route cache;
//   - http filters in order: header_mutation, ext_proc (header-only, message_timeout,
//     failure_mode_allow, forward_rules, mutation_rules, clear_route_cache only with a header
//     mutation), router;
//   - routes: prefix and header matchers (present, exact, safe_regex), cluster and cluster_header with
//     cluster_not_found_response_code, retries on connect-failure and refused-stream to other hosts;
//   - clusters: STATIC and STRICT_DNS endpoints, upstream TLS (CA, SNI, SAN match, client
//     certificate), HTTP/2 or HTTP/1.1 from the explicit protocol options, active /readyz health
//     checks with thresholds, healthy_panic_threshold 0, least-request host choice;
//   - upgrades (websocket, spdy/3.1) and streaming responses (watches) with no route timeout.
//
// Each behaviour cites the Envoy documentation or source it copies. Outlier detection and circuit
// breakers are accepted but not enforced: no test depends on them.
package dataplane
