package extproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// TopologySource is what the service needs from discovery.
type TopologySource interface {
	Current() *discovery.Topology
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	src     TopologySource
	log     *zap.Logger
	metrics *metrics
}

// NewServer returns a Server reading from src.
func NewServer(src TopologySource, log *zap.Logger, reg prometheus.Registerer) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{src: src, log: log.Named("extproc"), metrics: newMetrics(reg)}
}

// streamState is where a stream is in the ext_proc exchange.
type streamState uint8

const (
	awaitingHeaders streamState = iota // nothing seen yet
	headersAnswered                    // request headers answered; Envoy < 1.37 keeps the stream open
)

// Process serves one stream: one HTTP request. Envoy sends request_headers first (header-only
// mode); any other phase it sends (a misconfigured processing mode) is answered with an empty
// response of the same phase instead of hanging the request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	state := awaitingHeaders
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded {
				return nil
			}
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = s.requestHeaders(r.RequestHeaders)
			state = headersAnswered
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			return status.Errorf(codes.InvalidArgument, "unknown ext_proc request %T in state %d", r, state)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// headerValue returns a header from Envoy's map; Envoy sends raw_value, older ones value.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.RawValue) > 0 {
		return string(h.RawValue)
	}
	return h.Value
}

// requestHeaders decides for one request.
func (s *Server) requestHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	start := time.Now()
	var method, path string
	var hasPath bool
	// Always remove client copies of the routing and identity headers (the listener removes them
	// too, before ext_proc runs, so a dead processor cannot turn this off).
	remove := []string{wire.RouteHeader, wire.RemoteUserHeader, wire.RemoteGroupHeader, wire.RemoteUIDHeader}
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch k := strings.ToLower(hv.Key); {
		case k == ":method":
			method = headerValue(hv)
		case k == ":path":
			path, hasPath = headerValue(hv), true
		case strings.HasPrefix(k, wire.RemoteExtraPrefix):
			remove = append(remove, k)
		}
	}
	outcome, resp := s.decide(method, path, hasPath, remove)
	s.metrics.decisions.WithLabelValues(outcome).Inc()
	s.metrics.latency.Observe(time.Since(start).Seconds())
	if ce := s.log.Check(zap.DebugLevel, "decision"); ce != nil {
		ce.Write(zap.String("method", method), zap.String("path", path), zap.String("outcome", outcome))
	}
	return resp
}

func (s *Server) decide(method, path string, hasPath bool, remove []string) (string, *extprocv3.ProcessingResponse) {
	if !hasPath {
		return OutcomeInvalid, immediate(http.StatusBadRequest, "BadRequest", "request has no :path")
	}
	r, err := Classify(method, path)
	if err != nil {
		return OutcomeInvalid, immediate(http.StatusBadRequest, "BadRequest", err.Error())
	}
	switch r.Kind {
	case Discovery:
		return OutcomeDiscovery, continueWith(remove, "")
	case NonResource:
		return OutcomePassthrough, continueWith(remove, "")
	}
	t := s.src.Current()
	if t == nil {
		return OutcomeUnsynced, continueWith(remove, "")
	}
	d := t.Decide(r.Key, r.Verb)
	switch d.Action {
	case discovery.ActionRoute:
		return OutcomeRouted, continueWith(remove, d.Cluster)
	case discovery.ActionUnavailable:
		return OutcomeUnavailable, immediate(http.StatusServiceUnavailable, string(metav1.StatusReasonServiceUnavailable),
			fmt.Sprintf("no apiserver that serves %s is available, retry later", resourceName(r.Key)))
	}
	return OutcomeDefault, continueWith(remove, "")
}

func resourceName(k discovery.ResourceKey) string {
	s := k.Resource
	if k.Subresource != "" {
		s += "/" + k.Subresource
	}
	if k.Group == "" {
		return s + " (" + k.Version + ")"
	}
	return s + "." + k.Group + " (" + k.Version + ")"
}

// continueWith lets the request go on, with the routing header set to cluster (or removed). The
// response always carries a header mutation: Envoy only clears the route cache when it does
// (envoy#31241), and clear_route_cache makes the route table see our header.
func continueWith(remove []string, cluster string) *extprocv3.ProcessingResponse {
	m := &extprocv3.HeaderMutation{RemoveHeaders: remove}
	if cluster != "" {
		m.RemoveHeaders = remove[1:] // RouteHeader is overwritten instead
		m.SetHeaders = []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: wire.RouteHeader, RawValue: []byte(cluster)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}}
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
	headers := []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}
	if code == http.StatusServiceUnavailable {
		headers = append(headers, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte("1")}})
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
		Body:    body,
		Details: "skewgate_" + strings.ToLower(reason),
	}}}
}
