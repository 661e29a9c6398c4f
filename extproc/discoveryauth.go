package extproc

import (
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
//     allow_mode_override). The finished merged answer, negotiated from this request's Accept and
//     If-None-Match, waits on the stream: one pointer, nothing else.
//  2. response_headers: if the apiserver's status shows the request passed authentication and
//     authorization, the front replaces its answer with the merged one (ImmediateResponse, which
//     Envoy sends as a local reply while the upstream response is not yet on its way downstream).
//     Any other status (401, 403, 429, 5xx) passes through untouched: what the apiserver decided.
//
// If the processor fails or times out in the response phase, Envoy (failure_mode_allow) passes the
// apiserver's own answer: one apiserver's document instead of the merged one, never more access.
//
// Envoy source (ext_proc filter, source/extensions/filters/http/ext_proc/ext_proc.cc,
// Filter::onReceiveMessage): mode_override is applied only with allow_mode_override, while the filter
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

// pending is the answer chosen from the request headers, waiting on the stream for the upstream's
// response headers: one pointer per stream.
type pending struct {
	resp *extprocv3.ProcessingResponse
	// openAPI is the OpenAPI kind (OpenAPIIndex, OpenAPIDocument) of an OpenAPI answer, "" for
	// discovery.
	openAPI string
}

// Discovery outcomes in the response phase (label values of skewgate_extproc_discovery_responses_total).
const (
	DiscoveryServed     = "served"     // the apiserver authorized the request: the merged answer replaced its own
	DiscoveryPassed     = "passed"     // the apiserver refused (or failed): its answer passed through
	DiscoveryUnexpected = "unexpected" // response headers on a stream that holds no discovery answer
)

// OpenAPI outcomes in the response phase (label values of skewgate_extproc_openapi_responses_total):
// the front's answer by its status, or the apiserver's passed through.
const (
	OpenAPIServed      = "served"       // 200 (or 206, 412, 416)
	OpenAPIRedirected  = "redirected"   // 301 to the hash the front publishes
	OpenAPINotModified = "not_modified" // 304
	OpenAPIPassed      = "passed"       // the apiserver refused (or failed): its answer passed through
)

// responseHeaders answers the upstream's response headers on a stream that asked for them.
func (s *Server) responseHeaders(h *extprocv3.HttpHeaders, p *pending) *extprocv3.ProcessingResponse {
	pass := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	if p == nil {
		s.metrics.discoveryResponses.WithLabelValues(DiscoveryUnexpected).Inc()
		return pass
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
	if p.openAPI != "" {
		if !authorizedOpenAPIStatus(code) {
			s.metrics.openAPIResponses.WithLabelValues(p.openAPI, OpenAPIPassed).Inc()
			return pass
		}
		outcome := OpenAPIServed
		switch p.resp.GetImmediateResponse().GetStatus().GetCode() {
		case http.StatusMovedPermanently:
			outcome = OpenAPIRedirected
		case http.StatusNotModified:
			outcome = OpenAPINotModified
		}
		s.metrics.openAPIResponses.WithLabelValues(p.openAPI, outcome).Inc()
		return p.resp
	}
	if !authorizedStatus(code) {
		s.metrics.discoveryResponses.WithLabelValues(DiscoveryPassed).Inc()
		return pass
	}
	s.metrics.discoveryResponses.WithLabelValues(DiscoveryServed).Inc()
	return p.resp
}
