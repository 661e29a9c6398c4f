// Package dataplane is the test data plane: a Go stand-in for Envoy, for tests and the local demo
// on machines where no Envoy binary can be installed. It is never shipped, and it shares no code
// with skewgate: it reads the xDS resources it receives on its own. Everything it logs says it
// stands in for Envoy, with the seed of its random choices (Config.Seed; 0 picks and logs one).
//
// It must never be kinder than Envoy. Each Envoy behaviour the tests depend on follows Envoy's
// source, not its docs; CONFORMANCE.md beside this file lists every one with the Envoy source file,
// the releases it holds at, and the test here that shows it. In short:
//
//   - xDS: ADS over delta (default, as skewgate's bootstrap) or SotW; node with user_agent_name
//     "envoy" and user_agent_build_version (Config.EnvoyVersion); CDS, then LDS once the clusters
//     initialized, RDS and SDS by name.
//   - Startup: no connection is accepted (the socket is not listening) before the clusters of the
//     first CDS response initialized (one health check round, failed checks included) and the
//     listener's routes and SDS secrets arrived; later listener updates warm likewise while the
//     active listener serves.
//   - Connection manager: underscore headers per headers_with_underscores_action (400 + close on
//     HTTP/1, stream reset on HTTP/2); path normalization in Envoy's order (escaped slashes,
//     googleurl's canonicalization, then merge_slashes; a fragment or an escaped NUL is a 400); XFF
//     appended with use_remote_address; internal_only_headers removed from non-internal requests
//     (internal_address_config: unset, no peer is internal; empty cidr_ranges, Envoy's RFC1918 and
//     loopback default) before the route is chosen; XFCC SANITIZE_SET; the route, and a
//     cluster_header cluster, fixed before the first filter and re-matched only after a filter
//     cleared the cache.
//   - header_mutation never clears the route cache. ext_proc clears it only for a header mutation
//     with clear_route_cache; fail-open keeps the route; reads only the deprecated append
//     BoolValue; mutation_rules as the shared Checker; rejected mutations answer 500;
//     ImmediateResponse; allow_mode_override as effectiveModeOverride (DEFAULT keeps the filter's
//     mode) with the response_headers phase; per-route overrides; message_timeout runs from before
//     the stream connects, so a processor that never speaks HTTP/2 costs the whole timeout.
//   - Route matching: safe_regex is RE2 in Latin-1 mode (every supported release); a header sent
//     as several entries is matched joined with "," as 1.37 and 1.38 do, or value by value as
//     1.39 and later do, by Config.EnvoyVersion; ignore_path_parameters_in_path_matching is refused.
//   - Lua filter: envoy_on_request in gopher-lua (Lua 5.1 like LuaJIT, not LuaJIT) with only
//     the API skewgate's identity script uses: headers get/add, respond as a local reply,
//     downstreamSslConnection with BoringSSL's RFC 2253 subject, the digest, and validated false
//     on a resumed session; a script error lets the request continue.
//   - Router: NC with cluster_not_found_response_code for unknown or warming clusters;
//     request_headers_to_remove/add at forwarding; retries only for the route's retry_on, with
//     previous_hosts; generic upgrade payload held until 101 (a refused upgrade closes the
//     connection); local_reply_config mappers by response flag.
//   - Clusters: warming until every host had its first health check; HTTP health checks with
//     Envoy's thresholds over the socket transport_socket_match_criteria selects; outlier detection
//     on consecutive 5xx, gateway and local-origin failures (upstream answers count in split mode
//     too); least-request P2C with random ties; healthy_panic_threshold; upstream TLS verified
//     against trusted_ca and SAN matchers; a response with x-envoy-immediate-health-check-fail
//     marks a health-checked host unhealthy until its next passing check; upstream http_filters of
//     header_mutation removals then upstream_codec run first (any other chain is refused).
//   - Listener: the bootstrap's global downstream connection limit (overload manager monitor, or
//     the deprecated runtime key): over it a connection is accepted and closed at once.
//   - Secrets: SDS files read on arrival and again only on a move into the watched path; inline
//     certificates never reload.
package dataplane
