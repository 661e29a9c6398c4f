package extproc

import (
	"context"
	"net/http"
	"strconv"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Discovery (and OpenAPI v3, openapi.go) at the front never shows a request more than an apiserver
// would. The merged documents are only served to a request an apiserver has let through authentication and authorization:
//
//  1. request_headers: the request goes on to the default cluster (or its anonymous twin) like any
//     other, and the answer carries mode_override {response_header_mode: SEND}, so Envoy sends this
//     stream the upstream's response headers too (the listener's ext_proc filter has
//     allow_mode_override). Nothing is negotiated, rendered or served yet: the stream keeps only the
//     headers the answer depends on (pending), whatever their size costs no work until step 2.
//  2. response_headers: if the apiserver's status shows the request passed authentication and
//     authorization, the front builds its answer (negotiated from this request's Accept and
//     conditional headers, within a serving slot, frontlimit.go) and replaces the apiserver's with it
//     (ImmediateResponse, which Envoy sends as a local reply while the upstream response is not yet
//     on its way downstream). Any other status (401, 403, 429, 5xx) passes through untouched: what
//     the apiserver decided, at the cost of reading one header.
//
// If the processor fails or times out in the response phase, Envoy (failure_mode_allow) passes the
// apiserver's own answer: one apiserver's document instead of the merged one, never more access.
//
// Envoy source (ext_proc filter, source/extensions/filters/http/ext_proc/ext_proc.cc,
// Filter::onReceiveMessage, in the newest main copies, test/dataplane/CONFORMANCE.md row 11, which
// the 1.37.0-1.40.0 changelogs do not change): mode_override is applied only with allow_mode_override, while the filter
// waits for a headers response, and only when no body mode is FULL_DUPLEX_STREAMED; newer releases
// treat DEFAULT header modes in it as unset (effectiveModeOverride), older ones replace the whole
// mode, so discoveryMode spells out every field as the listener's mode with response headers on. An
// allowed_override_modes list, if the listener has one, must contain exactly this mode.
var discoveryMode = &extprocfilterv3.ProcessingMode{
	RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
	ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
	RequestBodyMode:     extprocfilterv3.ProcessingMode_NONE,
	ResponseBodyMode:    extprocfilterv3.ProcessingMode_NONE,
	RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
	ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
}

// authorizedStatus says whether an apiserver's status for a discovery path proves that the request
// passed authentication and authorization. The apiserver's handler chain
// (k8s.io/apiserver pkg/server/config.go, DefaultBuildHandlerChain) authenticates (401) and
// authorizes (403) before any handler runs; a 200 or 304 is the handler's document, and a 404 is the
// handler saying it does not serve a group or version that another upstream does (the merged answer
// exists, so some apiserver serves it, and authorization of a discovery path does not depend on
// which apiserver asks). Priority and fairness (429) and the server errors can come before
// authorization and prove nothing.
func authorizedStatus(code int) bool {
	switch code {
	case http.StatusOK, http.StatusNotModified, http.StatusNotFound:
		return true
	}
	return false
}

// authorizedOpenAPIStatus is authorizedStatus for the OpenAPI v3 paths: every status their handlers
// write after the handler chain authorized the request. handler3 (kube-openapi pkg/handler3)
// answers 301 to a ?hash= it does not publish (the usual answer to the front's merged hash) and
// http.ServeContent's 200, 206, 304, 412 and 416; kube-aggregator's OpenAPI v3 handler answers 404
// for a key none of its delegates lists. /openapi and /openapi/* are non-resource URLs authorized by
// path alone (system:discovery), the same on every apiserver.
func authorizedOpenAPIStatus(code int) bool {
	switch code {
	case http.StatusOK, http.StatusPartialContent, http.StatusMovedPermanently, http.StatusNotModified,
		http.StatusNotFound, http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
		return true
	}
	return false
}

// pending is what a stream that asked for the response headers keeps until they arrive: how to
// build the front's answer, never the answer itself. Nothing of it runs in the request phase, where
// no apiserver has authorized the request yet: an anonymous request costs the same whatever its
// Accept, Range or conditional headers say.
type pending struct {
	// prepare, if set, runs first in the response phase (answer after it), without a serving
	// slot: it waits for work bounded on its own (a protobuf rendering, one at a time per document).
	prepare func()
	// answer builds the front's answer, holding a serving slot (frontlimit.go); nil: nothing the
	// front answers (nothing acceptable, profile=nopeer), the apiserver's own answer passes.
	answer func() *extprocv3.ProcessingResponse
	// openAPI is the OpenAPI kind (OpenAPIIndex, OpenAPIDocument) of an OpenAPI answer, "" for
	// discovery.
	openAPI string
}

// Discovery outcomes in the response phase (label values of skewgate_extproc_discovery_responses_total).
const (
	DiscoveryServed     = "served"     // the apiserver authorized the request: the merged answer replaced its own
	DiscoveryPassed     = "passed"     // the apiserver refused (or failed), or profile=nopeer: its answer passed through
	DiscoveryUnexpected = "unexpected" // response headers on a stream that holds no discovery answer
	DiscoveryBusy       = "busy"       // authorized, but no serving slot came free in time: 503 with Retry-After
)

// OpenAPI outcomes in the response phase (label values of skewgate_extproc_openapi_responses_total):
// the front's answer by its status, or the apiserver's passed through.
const (
	OpenAPIServed      = "served"       // 200 (or 206, 412, 416)
	OpenAPIRedirected  = "redirected"   // 301 to the hash the front publishes
	OpenAPINotModified = "not_modified" // 304
	OpenAPIPassed      = "passed"       // the apiserver refused (or failed), or nothing acceptable: its answer passed through
	OpenAPIBusy        = "busy"         // authorized, but no serving slot came free in time: 503 with Retry-After
)

// responseHeaders answers the upstream's response headers on a stream that asked for them. release,
// if not nil, gives back the serving slot the answer holds: the caller calls it once the answer is
// sent, so a slot covers the whole cost of an answer, marshalling included.
func (s *Server) responseHeaders(ctx context.Context, h *extprocv3.HttpHeaders, p *pending) (resp *extprocv3.ProcessingResponse, release func()) {
	pass := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	if p == nil {
		s.metrics.discoveryResponses.WithLabelValues(DiscoveryUnexpected).Inc()
		return pass, nil
	}
	code := -1
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ":status" {
			if c, err := strconv.Atoi(headerValue(hv)); err == nil {
				code = c
			}
			break
		}
	}
	count := func(openAPI, discovery string) {
		if p.openAPI != "" {
			s.metrics.openAPIResponses.WithLabelValues(p.openAPI, openAPI).Inc()
		} else {
			s.metrics.discoveryResponses.WithLabelValues(discovery).Inc()
		}
	}
	if (p.openAPI != "" && !authorizedOpenAPIStatus(code)) || (p.openAPI == "" && !authorizedStatus(code)) {
		count(OpenAPIPassed, DiscoveryPassed)
		return pass, nil
	}
	if p.prepare != nil {
		p.prepare()
	}
	release, ok := s.slots.acquire(ctx)
	if !ok {
		count(OpenAPIBusy, DiscoveryBusy)
		return busy(), nil
	}
	resp = p.answer()
	if resp == nil {
		release()
		count(OpenAPIPassed, DiscoveryPassed)
		return pass, nil
	}
	switch resp.GetImmediateResponse().GetStatus().GetCode() {
	case http.StatusMovedPermanently:
		count(OpenAPIRedirected, DiscoveryServed)
	case http.StatusNotModified:
		count(OpenAPINotModified, DiscoveryServed)
	default:
		count(OpenAPIServed, DiscoveryServed)
	}
	return resp, release
}
