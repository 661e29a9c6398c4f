package dataplane

import (
	"fmt"
	"net/http"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
)

// upstreamFilters is a cluster's upstream HTTP filter chain (HttpProtocolOptions.http_filters). The
// stand-in knows one shape: header_mutation filters whose only mutations remove response headers,
// then the terminal upstream_codec; any other chain is refused rather than ignored, so no test runs
// on a chain the stand-in would not apply as Envoy does.
//
// Envoy builds the cluster's chain for every upstream request before the router's
// (source/common/router/upstream_request.cc, UpstreamRequest: createFilterChain(*parent_.cluster())
// first); response headers travel from the codec (UpstreamCodecFilter::CodecBridge::decodeHeaders in
// upstream_codec_filter.cc) through the chain's encoder filters, and only then reach
// UpstreamRequest::decodeHeaders and the router's onUpstreamHeaders. header_mutation registers an
// upstream factory (source/extensions/filters/http/header_mutation/config.cc) and applies
// response_mutations in encodeHeaders (header_mutation.cc). Read at 0075dc33dd (upstream_request.cc,
// upstream_codec_filter.cc), 170253a39c (config.cc), 0340a59ab1 (header_mutation.cc); the index
// holds no copy at the 1.37.6..1.40.0 tags.
type upstreamFilters struct {
	removeResponse []string // response headers the chain removes, in order
}

// parseUpstreamFilters reads the chain of the cluster's HttpProtocolOptions; nil without one (the
// default chain: the codec alone).
func parseUpstreamFilters(c *clusterv3.Cluster) (*upstreamFilters, error) {
	a, ok := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		return nil, nil
	}
	var o httpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		return nil, err
	}
	if len(o.HttpFilters) == 0 {
		return nil, nil
	}
	uf := &upstreamFilters{}
	last := len(o.HttpFilters) - 1
	for i, hf := range o.HttpFilters {
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("upstream filter %s: %w", hf.Name, err)
		}
		switch cfg := m.(type) {
		case *upstreamcodecv3.UpstreamCodec:
			if i != last {
				return nil, fmt.Errorf("upstream filter %s: upstream_codec must be the last filter", hf.Name)
			}
		case *headermutationv3.HeaderMutation:
			if i == last {
				return nil, fmt.Errorf("upstream filter %s: the last upstream filter must be upstream_codec", hf.Name)
			}
			mu := cfg.GetMutations()
			if len(mu.GetRequestMutations()) > 0 || len(mu.GetQueryParameterMutations()) > 0 || cfg.MostSpecificHeaderMutationsWins {
				return nil, fmt.Errorf("upstream filter %s: only response header removals are supported by the test data plane", hf.Name)
			}
			for _, rm := range mu.GetResponseMutations() {
				if rm.GetRemove() == "" {
					return nil, fmt.Errorf("upstream filter %s: only response header removals are supported by the test data plane", hf.Name)
				}
				uf.removeResponse = append(uf.removeResponse, rm.GetRemove())
			}
		default:
			return nil, fmt.Errorf("upstream filter %s: %s is not supported by the test data plane", hf.Name, proto.MessageName(m))
		}
	}
	return uf, nil
}

// encodeHeaders runs the chain's encoder side on an upstream response's headers.
func (uf *upstreamFilters) encodeHeaders(h http.Header) {
	if uf == nil {
		return
	}
	for _, k := range uf.removeResponse {
		h.Del(k)
	}
}

// immediateHealthCheckFailHeader is Http::Headers::EnvoyImmediateHealthCheckFail with the default
// header prefix (source/common/http/headers.h).
const immediateHealthCheckFailHeader = "X-Envoy-Immediate-Health-Check-Fail"

// onUpstreamHeaders is the part of the router's Filter::onUpstreamHeaders (source/common/router/
// router.cc at 001b1c0cd4 and 39afb121ca) that acts on x-envoy-immediate-health-check-fail, after the upstream
// filters ran: a response carrying it, whatever its value, calls
// healthChecker().setUnhealthy(ImmediateHealthCheckFail), unconditionally (suppress_envoy_headers
// does not cover it). A host without an active health checker has the null monitor: nothing happens.
// With one, HealthCheckerImplBase::setUnhealthyCrossThread (health_checker_base_impl.cc at
// 1204f55de6) sets EXCLUDED_VIA_IMMEDIATE_HC_FAIL and the session's setUnhealthy(PASSIVE,
// retriable=false) sets FAILED_ACTIVE_HC at once (a non-network failure ignores
// unhealthy_threshold) and restarts the healthy count; the check's timer is left as it was, and
// handleSuccess clears both flags at the next pass that reaches healthy_threshold.
func (c *cluster) onUpstreamHeaders(h *host, resp *http.Response) {
	c.upstream.encodeHeaders(resp.Header)
	if c.hc == nil || len(resp.Header.Values(immediateHealthCheckFailHeader)) == 0 {
		return
	}
	h.hcmu.Lock()
	defer h.hcmu.Unlock()
	h.hcExcluded.Store(true)
	h.numHealthy = 0
	if h.healthy.Load() {
		h.healthy.Store(false)
	}
	c.dp.logf("host %s of %s marked unhealthy by %s", h.addr, c.name, immediateHealthCheckFailHeader)
}
