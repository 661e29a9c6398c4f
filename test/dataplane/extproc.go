package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// extProcFilter is one configured ext_proc filter and its gRPC connection to the processor cluster.
type extProcFilter struct {
	cfg    *extprocfilterv3.ExternalProcessor
	client extprocv3.ExternalProcessorClient
	conn   *grpc.ClientConn
}

func dialProcessor(c *cluster) (*grpc.ClientConn, error) {
	if len(c.hosts) == 0 {
		return nil, fmt.Errorf("ext_proc cluster %s has no endpoint", c.name)
	}
	creds := insecure.NewCredentials()
	if c.tlsConfig != nil {
		tc := c.tlsConfig.Clone()
		tc.NextProtos = []string{"h2"}
		creds = credentials.NewTLS(tc)
	}
	return grpc.NewClient(c.hosts[0].addr, grpc.WithTransportCredentials(creds))
}

// headerMap is what Envoy sends to the processor: pseudo-headers, then every request header as
// raw_value, lower-case keys, minus those forward_rules disallow (filters/http/ext_proc/v3
// HeaderForwardingRules).
func (f *extProcFilter) headerMap(v *requestView) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	add := func(k, val string) {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(val)})
	}
	add(":authority", v.authority)
	add(":path", v.path)
	add(":method", v.method)
	add(":scheme", v.scheme)
	for k, vals := range v.header {
		lk := strings.ToLower(k)
		if !f.forwarded(lk) {
			continue
		}
		for _, val := range vals {
			add(lk, val)
		}
	}
	return hm
}

func (f *extProcFilter) forwarded(k string) bool {
	for _, m := range f.cfg.GetForwardRules().GetDisallowedHeaders().GetPatterns() {
		if e := m.GetExact(); e != "" && (k == e || (m.IgnoreCase && strings.EqualFold(k, e))) {
			return false
		}
	}
	return true
}

// call sends request_headers and waits up to message_timeout for the answer. Envoy >= 1.37 closes
// the stream after the last needed response; this data plane does the same.
func (f *extProcFilter) call(ctx context.Context, v *requestView, md []string) (*extprocv3.ProcessingResponse, error) {
	timeout := f.cfg.MessageTimeout.AsDuration()
	if timeout <= 0 {
		timeout = 200 * time.Millisecond // Envoy's default message_timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := f.client.Process(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: f.headerMap(v), EndOfStream: v.method == http.MethodGet || v.method == http.MethodHead},
	}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	stream.CloseSend()
	return resp, nil
}

// systemHeader: what mutation_rules.disallow_system forbids (":"-headers and host).
func systemHeader(k string) bool { return strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") }

// applyMutation applies an ext_proc HeaderMutation: removals, then sets with their append action
// (Envoy's ext_proc MutationUtils::applyHeaderMutations handles remove_headers before set_headers).
func applyMutation(h http.Header, m *extprocv3.HeaderMutation, rules bool) error {
	for _, k := range m.GetRemoveHeaders() {
		if rules && systemHeader(k) {
			return fmt.Errorf("mutation of %s disallowed", k)
		}
		h.Del(k)
	}
	for _, o := range m.GetSetHeaders() {
		k := o.GetHeader().GetKey()
		if rules && systemHeader(k) {
			return fmt.Errorf("mutation of %s disallowed", k)
		}
		val := string(o.GetHeader().GetRawValue())
		if val == "" {
			val = o.GetHeader().GetValue()
		}
		setHeader(h, k, val, o.AppendAction)
	}
	return nil
}

func setHeader(h http.Header, k, val string, action corev3.HeaderValueOption_HeaderAppendAction) {
	switch action {
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		h.Set(k, val)
	case corev3.HeaderValueOption_ADD_IF_ABSENT:
		if h.Get(k) == "" {
			h.Set(k, val)
		}
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		if h.Get(k) != "" {
			h.Set(k, val)
		}
	default: // APPEND_IF_EXISTS_OR_ADD
		h.Add(k, val)
	}
}
