package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/utils/clock"
)

// errMessageTimeout is ext_proc's message_timeout firing (Filter::onMessageTimeout).
var errMessageTimeout = errors.New("ext_proc message timeout")

// grpcConn is the cluster's gRPC channel (envoy_grpc), dialled at first use.
func (c *cluster) grpcClient() (*grpc.ClientConn, error) {
	c.grpcOnce.Do(func() {
		if len(c.hosts) == 0 {
			c.grpcErr = fmt.Errorf("cluster %s has no endpoint", c.name)
			return
		}
		creds := insecure.NewCredentials()
		if c.deflt != nil {
			tc := c.deflt.Clone()
			tc.NextProtos = []string{"h2"}
			creds = credentials.NewTLS(tc)
		}
		c.grpcConn, c.grpcErr = grpc.NewClient(c.hosts[0].addr, grpc.WithTransportCredentials(creds))
	})
	if c.grpcConn == nil && c.grpcErr == nil {
		return nil, fmt.Errorf("cluster %s was removed", c.name)
	}
	return c.grpcConn, c.grpcErr
}

// extProcStream is one HTTP request's ext_proc stream with its effective processing mode. The
// gRPC stream is started with the first message, under that message's timer (see exchange).
type extProcStream struct {
	cfg     *extprocfilterv3.ExternalProcessor
	client  extprocv3.ExternalProcessorClient
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	clock   clock.Clock
	mode    *extprocfilterv3.ProcessingMode

	mu     sync.Mutex
	stream extprocv3.ExternalProcessor_ProcessClient // nil until started
	busy   bool                                      // an exchange's goroutine is using stream
}

// perRoute is the route's ExtProcPerRoute under the filter's name (typed_per_filter_config of the
// route, else of the virtual host): disabled, or overrides (grpc_initial_metadata merged into the
// stream's initial metadata, processing_mode).
func perRoute(e *routeEntry, name string) *extprocfilterv3.ExtProcPerRoute {
	if e == nil {
		return nil
	}
	for _, m := range []map[string]*anypb.Any{e.route.GetTypedPerFilterConfig(), e.vhost.GetTypedPerFilterConfig()} {
		if a, ok := m[name]; ok {
			var pr extprocfilterv3.ExtProcPerRoute
			if a.UnmarshalTo(&pr) == nil {
				return &pr
			}
		}
	}
	return nil
}

// clock is Config.Clock, or the real clock.
func (d *DataPlane) clock() clock.Clock {
	if d.cfg.Clock == nil {
		return clock.RealClock{}
	}
	return d.cfg.Clock
}

// openExtProc prepares the stream on the filter's cluster: a missing cluster is a gRPC error
// (fail-open with failure_mode_allow). Like Envoy's async client, nothing waits for a connection
// here: the stream starts with the first message (exchange).
func (d *DataPlane) openExtProc(ctx context.Context, cfg *extprocfilterv3.ExternalProcessor, pr *extprocfilterv3.ExtProcPerRoute) (*extProcStream, error) {
	c := d.clusters.get(cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	if c == nil {
		return nil, errors.New("ext_proc cluster not found")
	}
	conn, err := c.grpcClient()
	if err != nil {
		return nil, err
	}
	md := []string{}
	for _, h := range cfg.GetGrpcService().GetInitialMetadata() {
		md = append(md, h.Key, h.Value)
	}
	for _, h := range pr.GetOverrides().GetGrpcInitialMetadata() {
		md = append(md, h.Key, h.Value)
	}
	ctx, cancel := context.WithCancel(ctx)
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	mode := cfg.GetProcessingMode()
	if m := pr.GetOverrides().GetProcessingMode(); m != nil {
		mode = m
	}
	if mode == nil {
		mode = &extprocfilterv3.ProcessingMode{}
	}
	timeout := durationOr(cfg.MessageTimeout.AsDuration(), 200*time.Millisecond) // default message_timeout
	return &extProcStream{cfg: cfg, client: extprocv3.NewExternalProcessorClient(conn), ctx: ctx, cancel: cancel,
		timeout: timeout, clock: d.clock(), mode: mode}, nil
}

// exchange sends one message and waits message_timeout for the answer. The timer runs from before
// the stream exists, as in Envoy: Filter::onHeaders opens the stream (Grpc::AsyncClient start,
// which only queues it on the HTTP/2 pool), starts the message timer (onStartProcessorCall) and
// then sends; the pool hands the stream a connection once the transport is connected, without
// waiting for the server's SETTINGS (source/common/http/conn_pool_base.cc,
// MultiplexedActiveClientBase::onSettings; source/common/conn_pool/conn_pool_base.cc,
// onConnectionEvent). So a processor that accepts TCP and never answers costs message_timeout,
// and one that refuses the connection fails the stream at once (pool failure, then onGrpcError).
func (s *extProcStream) exchange(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	type result struct {
		resp *extprocv3.ProcessingResponse
		err  error
	}
	ch := make(chan result, 1)
	s.mu.Lock()
	s.busy = true
	s.mu.Unlock()
	go func() {
		finish := func(r *extprocv3.ProcessingResponse, err error) {
			s.mu.Lock()
			s.busy = false
			s.mu.Unlock()
			ch <- result{r, err}
		}
		s.mu.Lock()
		st := s.stream
		s.mu.Unlock()
		if st == nil {
			// grpc-go blocks here while the channel connects and fails at once when it cannot.
			var err error
			if st, err = s.client.Process(s.ctx); err != nil {
				finish(nil, err)
				return
			}
			s.mu.Lock()
			s.stream = st
			s.mu.Unlock()
		}
		if err := st.Send(req); err != nil {
			finish(nil, err)
			return
		}
		finish(st.Recv())
	}()
	timer := s.clock.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-timer.C():
		s.cancel()
		return nil, errMessageTimeout
	}
}

// close ends the stream (Envoy closes it once no further message is expected). A stream still in
// an exchange that timed out is only cancelled (reset): gRPC streams take one sender at a time.
func (s *extProcStream) close() {
	s.mu.Lock()
	if s.stream != nil && !s.busy {
		s.stream.CloseSend()
	}
	s.mu.Unlock()
	s.cancel()
}

// sendResponseHeaders: the response_headers phase runs unless the effective mode skips it; the
// mode's DEFAULT means SEND (DecodingProcessorState / EncodingProcessorState::
// setProcessingModeInternal).
func (s *extProcStream) sendResponseHeaders() bool {
	return s.mode.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP
}

// overrideMode applies ProcessingResponse.mode_override on a headers response when
// allow_mode_override is set (Filter::onReceiveMessage, source/extensions/filters/http/ext_proc/
// ext_proc.cc): the mode becomes effectiveModeOverride(override, the filter's processing_mode):
// header and trailer modes left DEFAULT in the override keep the filter's configured mode (not a
// per-route one), body modes are taken as they are. If allowed_override_modes is set, that
// effective mode must equal one of them in every field but request_header_mode. Overrides are
// ignored with send_body_without_waiting_for_header_response (and with a FULL_DUPLEX_STREAMED body
// mode, which the test data plane refuses at LDS). An override asking for a body mode is ignored
// here: the test data plane processes no bodies (see CONFORMANCE.md).
func (s *extProcStream) overrideMode(resp *extprocv3.ProcessingResponse) {
	mo := resp.GetModeOverride()
	if mo == nil || !s.cfg.GetAllowModeOverride() || s.cfg.GetSendBodyWithoutWaitingForHeaderResponse() {
		return
	}
	eff := effectiveModeOverride(mo, s.cfg.GetProcessingMode())
	if eff.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_NONE || eff.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_NONE {
		return
	}
	if allowed := s.cfg.GetAllowedOverrideModes(); len(allowed) > 0 {
		ok := false
		for _, a := range allowed {
			if a.GetResponseHeaderMode() == eff.GetResponseHeaderMode() &&
				a.GetRequestBodyMode() == eff.GetRequestBodyMode() && a.GetResponseBodyMode() == eff.GetResponseBodyMode() &&
				a.GetRequestTrailerMode() == eff.GetRequestTrailerMode() && a.GetResponseTrailerMode() == eff.GetResponseTrailerMode() {
				ok = true
			}
		}
		if !ok {
			return
		}
	}
	s.mode = eff
}

// effectiveModeOverride is ext_proc.cc's effectiveModeOverride: "DEFAULT header modes in a
// ProcessingResponse mode_override have no effect (they are considered unset). Body modes are
// always explicit."
func effectiveModeOverride(target, existing *extprocfilterv3.ProcessingMode) *extprocfilterv3.ProcessingMode {
	m := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode: existing.GetRequestHeaderMode(), ResponseHeaderMode: existing.GetResponseHeaderMode(),
		RequestTrailerMode: existing.GetRequestTrailerMode(), ResponseTrailerMode: existing.GetResponseTrailerMode(),
		RequestBodyMode: target.GetRequestBodyMode(), ResponseBodyMode: target.GetResponseBodyMode(),
	}
	if v := target.GetRequestHeaderMode(); v != extprocfilterv3.ProcessingMode_DEFAULT {
		m.RequestHeaderMode = v
	}
	if v := target.GetResponseHeaderMode(); v != extprocfilterv3.ProcessingMode_DEFAULT {
		m.ResponseHeaderMode = v
	}
	if v := target.GetRequestTrailerMode(); v != extprocfilterv3.ProcessingMode_DEFAULT {
		m.RequestTrailerMode = v
	}
	if v := target.GetResponseTrailerMode(); v != extprocfilterv3.ProcessingMode_DEFAULT {
		m.ResponseTrailerMode = v
	}
	return m
}

// headerMap is what Envoy sends: pseudo-headers, then each header as raw_value with a lower-case
// key, minus those forward_rules exclude (MutationUtils::headersToProto).
func headerMap(pseudo [][2]string, h http.Header, rules *extprocfilterv3.HeaderForwardingRules) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	add := func(k, v string) {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	for _, p := range pseudo {
		add(p[0], p[1])
	}
	for k, vals := range h {
		lk := strings.ToLower(k)
		if !forwarded(lk, rules) {
			continue
		}
		for _, v := range vals {
			add(lk, v)
		}
	}
	return hm
}

// forwarded is MutationUtils::headerCanBeForwarded: never if disallowed; else if allowed_headers is
// set only those.
func forwarded(k string, rules *extprocfilterv3.HeaderForwardingRules) bool {
	if stringMatchAny(rules.GetDisallowedHeaders().GetPatterns(), k) {
		return false
	}
	allowed := rules.GetAllowedHeaders().GetPatterns()
	return len(allowed) == 0 || stringMatchAny(allowed, k)
}

func stringMatchAny(ms []*matcherv3.StringMatcher, s string) bool {
	for _, m := range ms {
		v := s
		if m.IgnoreCase {
			v = strings.ToLower(s)
		}
		lc := func(p string) string {
			if m.IgnoreCase {
				return strings.ToLower(p)
			}
			return p
		}
		switch {
		case m.GetExact() != "" && v == lc(m.GetExact()):
			return true
		case m.GetPrefix() != "" && strings.HasPrefix(v, lc(m.GetPrefix())):
			return true
		case m.GetSafeRegex() != nil && fullMatch(m.GetSafeRegex().Regex, s):
			return true
		}
	}
	return false
}

// immediateStatus is the ImmediateResponse status: 200 when unset or not a valid final status
// (MutationUtils::isValidHttpStatus: >= 200).
func immediateStatus(ir *extprocv3.ImmediateResponse) int {
	code := int(ir.GetStatus().GetCode())
	if ir.GetStatus() == nil || code < 200 {
		return 200
	}
	return code
}
