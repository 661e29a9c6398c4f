package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/decision"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/openapi"
)

// TopologySource is the one thing the service reads: the Topology every connected Envoy has
// acknowledged (xds.Server.Current, the one ACK gate), so every cluster a decision names is in every
// Envoy (make-before-break), and nil while there is none (Envoy's route table decides). Not
// discovery's newest: a Topology Envoy has not acknowledged may name clusters it lacks.
type TopologySource interface {
	Current() *discovery.Topology
}

// Option configures a Server.
type Option func(*Server)

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	src     TopologySource
	log     *zap.Logger
	metrics *metrics

	frontDiscovery perTopology[*frontDiscovery]
	frontOpenAPI   perTopology[*frontOpenAPI]
	openAPIConfig  openapi.FrontConfig // openapiserve.go
	ctx            context.Context     // WithContext
	slots          *slots              // the front's answers in flight (frontlimit.go)
	clock          clock.PassiveClock
}

// WithClock sets the clock decision durations are measured with [the real clock].
func WithClock(c clock.PassiveClock) Option { return func(s *Server) { s.clock = c } }

// NewServer returns a Server reading from src.
func NewServer(src TopologySource, log *zap.Logger, reg prometheus.Registerer, opts ...Option) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{src: src, log: log.Named("extproc"), metrics: newMetrics(reg), slots: newSlots(defaultSlots(), defaultSlotWait), clock: clock.RealClock{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Process serves one stream: one HTTP request. Envoy sends request_headers first (header-only
// mode). For a discovery or OpenAPI request the front answers itself, the answer asks Envoy for the
// response headers too (mode_override); the stream then holds what the answer depends on (pending)
// until they arrive, and builds the answer only if they show the request authorized. Any other
// phase Envoy sends (a misconfigured processing mode) is answered with an empty response of the same
// phase instead of hanging the request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	// Envoy marks a request that carries no credentials at all with stream metadata (wire.CredentialsMetadata).
	var anonymous bool
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		v := md.Get(wire.CredentialsMetadata)
		anonymous = len(v) == 1 && v[0] == wire.CredentialsNone
	}
	// pending is the answer chosen from the request, sent only if an apiserver authorizes it.
	var p *pending
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded {
				return nil
			}
			return err
		}
		var resp *extprocv3.ProcessingResponse
		var release func() // the serving slot of a front answer, given back once it is sent
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp, p = s.requestHeaders(r.RequestHeaders, anonymous)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp, release = s.responseHeaders(stream.Context(), r.ResponseHeaders, p)
			p = nil
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			return status.Errorf(codes.InvalidArgument, "unknown ext_proc request %T", r)
		}
		err = stream.Send(resp)
		if release != nil {
			release()
		}
		if err != nil {
			return err
		}
	}
}

// headerValue returns a header from Envoy's map; Envoy sends raw_value, older ones value. nil: "".
func headerValue(h *corev3.HeaderValue) string {
	if v := h.GetRawValue(); len(v) > 0 {
		return string(v)
	}
	return h.GetValue()
}

// headersRead is what the service reads from the request headers Envoy sends.
type headersRead struct {
	method, path                string
	hasPath, upgrade, anonymous bool
	refused                     string // the identity filter's refusal marker (wire.IdentityRefusedHeader), first value
	hasRefused                  bool
	answer                      answerHeaders
	seen                        uint8 // headers read by first
}

// answerHeaders are the request headers the front's own answers depend on (content negotiation and
// the conditional requests http.ServeContent reads), kept as Envoy sent them: nothing copies or
// parses them before the response phase, once an apiserver authorized the request. nil: absent.
type answerHeaders struct {
	accept, ifNoneMatch, ifModifiedSince, ifMatch, ifUnmodifiedSince, rang, ifRang *corev3.HeaderValue
}

// openAPIRequest reads the headers for an OpenAPI answer, with the request's raw query.
func (a *answerHeaders) openAPIRequest(query string) *openAPIRequest {
	return &openAPIRequest{query: query, accept: headerValue(a.accept), ifNoneMatch: headerValue(a.ifNoneMatch),
		ifModifiedSince: headerValue(a.ifModifiedSince), ifMatch: headerValue(a.ifMatch), ifUnmodifiedSince: headerValue(a.ifUnmodifiedSince),
		rang: singleRange(a.rang), ifRang: headerValue(a.ifRang)}
}

// singleRange is a Range header's value if it names one range at most, else "": the front answers
// several ranges with the whole document (openapi/serve.go, Request.httpRequest), so their value is not
// even copied.
func singleRange(h *corev3.HeaderValue) string {
	if v := h.GetRawValue(); len(v) > 0 {
		if bytes.IndexByte(v, ',') >= 0 {
			return ""
		}
		return string(v)
	}
	if strings.Contains(h.GetValue(), ",") {
		return ""
	}
	return h.GetValue()
}

// Bits of headersRead.seen.
const (
	seenAccept = 1 << iota
	seenIfNoneMatch
	seenIfModifiedSince
	seenIfMatch
	seenIfUnmodifiedSince
	seenRange
	seenIfRange
)

// first sets *dst to v if this is the header's first occurrence: a header sent more than once is
// read as the apiserver reads it, net/http's Header.Get, which takes the first value, an empty one
// included (content negotiation and If-None-Match in k8s.io/apiserver, http.ServeContent). Envoy
// sends ext_proc the entries of its header map in order (source/extensions/filters/http/ext_proc/
// mutation_utils.cc, MutationUtils::headersToProto iterates it), as it forwards them: the
// occurrences of a header as entries of their own, or, for a header its map keeps inline, one
// comma-joined entry, which both sides then read whole.
func (r *headersRead) first(bit uint8, dst **corev3.HeaderValue, v *corev3.HeaderValue) {
	if r.seen&bit == 0 {
		r.seen |= bit
		*dst = v
	}
}

// requestHeaders decides for one request. For a discovery or OpenAPI request the front serves
// itself it also returns how to build the answer once the upstream's response headers show the
// request is authorized (pending); it builds nothing.
func (s *Server) requestHeaders(h *extprocv3.HttpHeaders, anonymous bool) (*extprocv3.ProcessingResponse, *pending) {
	start := s.clock.Now()
	r := headersRead{anonymous: anonymous}
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch k := strings.ToLower(hv.Key); {
		case k == ":method":
			r.method = headerValue(hv)
		case k == ":path":
			r.path, r.hasPath = headerValue(hv), true
		case k == "accept":
			r.first(seenAccept, &r.answer.accept, hv)
		case k == "if-none-match":
			r.first(seenIfNoneMatch, &r.answer.ifNoneMatch, hv)
		case k == "if-modified-since":
			r.first(seenIfModifiedSince, &r.answer.ifModifiedSince, hv)
		case k == "if-match":
			r.first(seenIfMatch, &r.answer.ifMatch, hv)
		case k == "if-unmodified-since":
			r.first(seenIfUnmodifiedSince, &r.answer.ifUnmodifiedSince, hv)
		case k == "range":
			r.first(seenRange, &r.answer.rang, hv)
		case k == "if-range":
			r.first(seenIfRange, &r.answer.ifRang, hv)
		case k == "upgrade":
			r.upgrade = headerValue(hv) != ""
		case k == wire.IdentityRefusedHeader:
			if !r.hasRefused {
				r.refused, r.hasRefused = headerValue(hv), true
			}
		}
	}
	outcome, resp, p := s.decide(&r)
	s.metrics.decisions.WithLabelValues(outcome).Inc()
	s.metrics.latency.Observe(s.clock.Since(start).Seconds())
	if ce := s.log.Check(zap.DebugLevel, "decision"); ce != nil {
		ce.Write(zap.String("method", r.method), zap.String("path", r.path), zap.String("outcome", outcome))
	}
	return resp, p
}

func (s *Server) decide(r *headersRead) (string, *extprocv3.ProcessingResponse, *pending) {
	if !r.hasPath {
		return OutcomeInvalid, immediate(http.StatusBadRequest, "BadRequest", "request has no :path"), nil
	}
	c, err := decision.Classify(r.method, r.path)
	if err != nil {
		return OutcomeInvalid, immediate(http.StatusBadRequest, "BadRequest", err.Error()), nil
	}
	// The identity filter refused the certificate's identity: answer it, never route it. Only Envoy's
	// Lua filter can have set the marker (the strip filter removed any client copy).
	if r.hasRefused {
		return OutcomeIdentityRefused, s.refuseIdentity(r.refused), nil
	}
	t := s.src.Current()
	if t == nil {
		// No Topology in Envoy's snapshot from this process yet (a restart): Envoy's route table,
		// kept from before, holds the last decisions for every skewed resource, and naming
		// skewgate-all here would override them with a balance over every apiserver.
		return OutcomeUnsynced, s.continueWith(""), nil
	}
	// A request without credentials carries no identity at all: it reaches the apiservers over the
	// anonymous twin clusters, which present no client certificate, so each apiserver applies its own
	// anonymous policy exactly as it would to the request sent directly. Envoy says so through the
	// route it chose before any filter ran (no Authorization, no verified client certificate): no
	// header a client or a filter sets decides it.
	req := decision.Request{Method: r.method, Path: r.path, Anonymous: r.anonymous, Upgrade: r.upgrade, Class: c}
	a := t.Table().Decide(req)
	switch a.Path {
	case decision.PathDiscovery:
		return s.serveDiscovery(r, t, a)
	case decision.PathOpenAPIIndex:
		return s.serveOpenAPIIndex(r, t, a)
	case decision.PathOpenAPIDocument:
		if a.Action == decision.ActionServe {
			return s.serveOpenAPIDocument(r, t, req, a)
		}
	}
	switch a.Action {
	case decision.ActionRoute:
		return s.routeTo(a)
	case decision.ActionUnavailable:
		what := c.Key.String()
		if a.Path == decision.PathOpenAPIDocument {
			what = "the OpenAPI document " + a.Doc
		}
		return OutcomeUnavailable, immediate(http.StatusServiceUnavailable, string(metav1.StatusReasonServiceUnavailable),
			fmt.Sprintf("no apiserver that serves %s is available, retry later", what)), nil
	}
	if c.Kind != decision.Resource {
		return OutcomePassthrough, s.continueWith(a.Cluster), nil
	}
	return OutcomeDefault, s.continueWith(a.Cluster), nil
}

// serveDiscovery lets a discovery request go on to any apiserver, and answers it from the merged
// documents once that apiserver authorized it (responseHeaders), if the front holds the path.
func (s *Server) serveDiscovery(r *headersRead, t *discovery.Topology, a decision.Answer) (string, *extprocv3.ProcessingResponse, *pending) {
	plan := s.discoveryFor(t).plan(r.method, r.path)
	if plan == nil {
		return OutcomePassthrough, s.continueWith(a.Cluster), nil
	}
	// The apiserver decides whether this request may see discovery at all; the front only
	// replaces a document it was allowed to see, built then (responseHeaders).
	resp := s.continueWith(a.Cluster)
	resp.ModeOverride = discoveryMode
	accept, ifNoneMatch := r.answer.accept, r.answer.ifNoneMatch
	return OutcomeDiscovery, resp, &pending{answer: func() *extprocv3.ProcessingResponse {
		return plan.answer(headerValue(accept), headerValue(ifNoneMatch))
	}}
}

// routeTo sends the request to the cluster the table named (in every Envoy: t is the acknowledged
// Topology, see TopologySource).
func (s *Server) routeTo(a decision.Answer) (string, *extprocv3.ProcessingResponse, *pending) {
	return OutcomeRouted, s.continueWith(a.Cluster), nil
}

// continueWith lets the request go on, with the routing header naming cluster. Every decision names
// its cluster, the default ones too, except without a Topology (cluster ""): then Envoy's route
// table decides. The identity headers are left as the Lua filter set them (identity.go). The
// response always carries a header mutation, empty without a cluster: Envoy clears the route cache
// only when it does (DecodingProcessorState::clearRouteCache in
// source/extensions/filters/http/ext_proc/processor_state.cc; Go marshals a non-nil empty message,
// so has_header_mutation holds), and the route re-matched then sees our header and the headers the
// request arrived with; no route matches a header the Lua filter sets (X-Remote-*).
func (s *Server) continueWith(cluster string) *extprocv3.ProcessingResponse {
	m := &extprocv3.HeaderMutation{}
	if cluster != "" {
		m.SetHeaders = []*corev3.HeaderValueOption{setHeader(wire.RouteHeader, cluster, false)}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: m, ClearRouteCache: true}},
	}}
}

// immediate answers the request directly with a metav1.Status, the way an apiserver would.
func immediate(code int, reason, message string) *extprocv3.ProcessingResponse {
	body, _ := json.Marshal(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: metav1.StatusReason(reason), Code: int32(code),
	})
	headers := []*corev3.HeaderValueOption{setHeader("content-type", "application/json", false)}
	if code == http.StatusServiceUnavailable {
		headers = append(headers, setHeader("retry-after", "1", false))
	}
	return immediateResponse(code, headers, body, "skewgate_"+strings.ToLower(reason))
}

// immediateResponse answers the request from the service instead of an apiserver.
func immediateResponse(code int, headers []*corev3.HeaderValueOption, body []byte, details string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
		Body:    body,
		Details: details,
	}}}
}
