package xds

import (
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/skewgate/skewgate/xds/envoyconf"
)

// immediateHealthCheckFailHeader is Http::Headers::EnvoyImmediateHealthCheckFail
// (source/common/http/headers.h: the bootstrap's header_prefix, "x-envoy" as skewgate leaves it,
// then "-immediate-health-check-fail"; the copies read are named below).
const immediateHealthCheckFailHeader = "x-envoy-immediate-health-check-fail"

// Names of the apiserver clusters' upstream HTTP filters. The header_mutation instance has a name of
// its own: a filter looks its per-route config up by its configured name, and no route carries one
// under this name, so only the cluster's mutation below applies.
const (
	upstreamFilterStripHCFail = filterHeaderMutation + ".strip-immediate-health-check-fail"
	upstreamFilterCodec       = "envoy.filters.http.upstream_codec"
)

// apiserverUpstreamFilters is the upstream HTTP filter chain of every apiserver cluster: it removes
// x-envoy-immediate-health-check-fail from each upstream response before the router sees it.
//
// The router marks a host unhealthy whenever a response carries that header
// (source/common/router/router.cc, Filter::onUpstreamHeaders:
// headers->EnvoyImmediateHealthCheckFail() → healthChecker().setUnhealthy(ImmediateHealthCheckFail),
// unconditionally: neither suppress_envoy_headers nor a runtime guard covers it). The health checker
// then sets EXCLUDED_VIA_IMMEDIATE_HC_FAIL and, as a non-retriable PASSIVE failure, FAILED_ACTIVE_HC
// at once, ignoring unhealthy_threshold; only the next passing /readyz check clears both, on the
// schedule the check already had (health_checker_base_impl.cc: setUnhealthyCrossThread, setUnhealthy,
// handleSuccess). An apiserver passes a backend's response headers through for services/proxy,
// pods/proxy, nodes/proxy and aggregated APIs, so a user who runs such a backend (or a broken
// aggregated API server) could take every apiserver out, and with panic threshold 0 answer every
// client 503, once per check interval, for ever.
//
// The cluster's http_filters are tried before the router's (upstream_request.cc, UpstreamRequest:
// createFilterChain(*parent_.cluster()) first); the response headers come from the codec through
// UpstreamCodecFilter::CodecBridge::decodeHeaders into the upstream filter manager's encoder chain,
// and only when every filter has run does UpstreamRequestFilterManagerCallbacks::encodeHeaders call
// UpstreamRequest::decodeHeaders, which calls the router's onUpstreamHeaders
// (upstream_codec_filter.cc, upstream_request.cc/.h). header_mutation is registered as an upstream
// filter too (header_mutation/config.cc: REGISTER_FACTORY(UpstreamHeaderMutationFactoryConfig,
// UpstreamHttpFilterConfigFactory)) and its encodeHeaders applies response_mutations
// (header_mutation.cc). upstream_codec must be last. The active health checks use their own codec
// clients, not the router (health_checkers/http/health_checker_impl.cc), so /readyz is untouched.
// Read at envoyproxy/envoy: router.cc at 001b1c0cd4 and 39afb121ca, health_checker_base_impl.cc at 1204f55de6,
// upstream_request.cc and upstream_codec_filter.cc at 0075dc33dd, header_mutation config.cc at
// 170253a39c and header_mutation.cc at 0340a59ab1; no copy at the 1.37.6..1.40.0 tags could be
// read, their changelogs change none of this (test/dataplane/CONFORMANCE.md rows 39, 40), and every
// copy of router.cc read (back to the 1.x series before upstream filters) has
// the same unconditional check.
func apiserverUpstreamFilters() ([]*hcmv3.HttpFilter, error) {
	strip, err := envoyconf.Pack(&headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
		ResponseMutations: []*mutationrulesv3.HeaderMutation{{
			Action: &mutationrulesv3.HeaderMutation_Remove{Remove: immediateHealthCheckFailHeader},
		}},
	}})
	if err != nil {
		return nil, err
	}
	codec, err := envoyconf.Pack(&upstreamcodecv3.UpstreamCodec{})
	if err != nil {
		return nil, err
	}
	return []*hcmv3.HttpFilter{
		{Name: upstreamFilterStripHCFail, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: strip}},
		{Name: upstreamFilterCodec, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}},
	}, nil
}
