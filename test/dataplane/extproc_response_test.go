package dataplane

import (
	"net/http"
	"testing"
	"time"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestExtProcModeOverride: with allow_mode_override a request_headers answer carrying
// mode_override {response_header_mode: SEND} opens the response_headers phase for that request
// (the filter's processing_mode skips it); an ImmediateResponse there replaces the upstream's
// answer; without allow_mode_override the override is ignored; fail-open in the response phase
// keeps the upstream's answer. The override is effectiveModeOverride's (ext_proc.cc): header modes
// it leaves DEFAULT keep the filter's, and allowed_override_modes is matched against that
// effective mode, request_header_mode aside.
func TestExtProcModeOverride(t *testing.T) {
	sendResponse := &extprocfilterv3.ProcessingMode{ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND}
	// What effectiveModeOverride makes of sendResponse with the filter's mode, but for
	// request_header_mode, which allowed_override_modes matching ignores.
	effective := &extprocfilterv3.ProcessingMode{RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND, RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP}
	for _, tc := range []struct {
		name      string
		allow     bool
		slow      bool
		override  *extprocfilterv3.ProcessingMode
		allowed   []*extprocfilterv3.ProcessingMode
		wantCode  int
		wantBody  string
		responses int
	}{
		{"override allowed", true, false, sendResponse, nil, 200, "merged", 1},
		{"override not allowed", false, false, sendResponse, nil, 200, "a", 0},
		{"response phase times out: fail open", true, true, sendResponse, nil, 200, "a", 1},
		// effectiveModeOverride: DEFAULT header modes keep the filter's (response_header_mode SKIP).
		{"DEFAULT in the override keeps the configured mode", true, false,
			&extprocfilterv3.ProcessingMode{RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND}, nil, 200, "a", 0},
		{"allowed_override_modes matches the effective mode", true, false, sendResponse, []*extprocfilterv3.ProcessingMode{effective}, 200, "merged", 1},
		{"allowed_override_modes does not match the raw override", true, false, sendResponse, []*extprocfilterv3.ProcessingMode{sendResponse}, 200, "a", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newUpstream(t, "a")
			seen := make(chan *extprocv3.HttpHeaders, 4)
			release := stall(t)
			ep := startProcessor(t, func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				if rh := req.GetResponseHeaders(); rh != nil {
					seen <- rh
					if tc.slow {
						<-release
					}
					return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
						Status: &typev3.HttpStatus{Code: typev3.StatusCode_OK}, Body: []byte("merged"),
						Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHdr("content-type", "application/json", nil)}},
					}}}, nil
				}
				r := headersResponse(true, setHdr("x-route", "a", nil))
				r.ModeOverride = tc.override
				return r, nil
			})
			clk := clocktesting.NewFakeClock(time.Now())
			f := startFrontWith(t, Delta, func(c *Config) { c.Clock = clk }, listener(t, nil, extprocFilter(t, func(c *extprocfilterv3.ExternalProcessor) {
				c.AllowModeOverride, c.AllowedOverrideModes = tc.allow, tc.allowed
			})),
				routes(routeByHeader("by-header", "x-route")), plainCluster("a", a.addr()), extprocCluster(t, ep))
			f.waitActive("a")
			f.waitActive("extproc")
			var code int
			var body string
			if tc.slow {
				// The response phase's message: the processor has it, then its timer fires.
				code, body = getPastTimeout(t, f.client(false), clk, time.Second, f.url("/apis"), func() bool { return len(seen) == 1 })
			} else {
				code, body = get(t, f.client(false), f.url("/apis"))
			}
			if code != tc.wantCode || body != tc.wantBody || len(seen) != tc.responses {
				t.Errorf("%d %q after %d response_headers messages, want %d %q after %d", code, body, len(seen), tc.wantCode, tc.wantBody, tc.responses)
			}
			if tc.responses > 0 {
				rh := <-seen
				if got := headerValue(rh.GetHeaders(), ":status"); got != "200" {
					t.Errorf("response_headers carried :status %q, want the upstream's 200", got)
				}
			}
			if a.count() != 1 {
				t.Errorf("upstream got %d requests, want 1 (the response phase runs after it)", a.count())
			}
		})
	}
}

func headerValue(hm *corev3.HeaderMap, k string) string {
	for _, h := range hm.GetHeaders() {
		if h.Key == k {
			return string(h.RawValue)
		}
	}
	return ""
}

// TestMutationAppendSemantics: the deprecated append BoolValue decides (unset or false replaces,
// true adds); append_action is ignored.
func TestMutationAppendSemantics(t *testing.T) {
	yes, no := true, false
	h := http.Header{"X-Remote-Group": {"client-sent"}}
	m := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		setHdr("x-remote-group", "g1", &no),
		setHdr("x-remote-group", "g2", &yes),
		{Header: &corev3.HeaderValue{Key: "x-remote-group", RawValue: []byte("g3")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
		setHdr("x-remote-user", "u", nil),
	}}
	if err := applyMutation(h, m, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.Values("X-Remote-Group"); len(got) != 1 || got[0] != "g3" {
		t.Errorf("groups %q: want only g3 (append_action APPEND ignored, so g3 replaced g1,g2)", got)
	}
	h2 := http.Header{}
	applyMutation(h2, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHdr("x-g", "1", &no), setHdr("x-g", "2", &yes)}}, nil)
	if got := h2.Values("X-G"); len(got) != 2 {
		t.Errorf("append=false then append=true: %q, want both", got)
	}
	// value (not raw_value) is not read: the header is set empty.
	h3 := http.Header{}
	applyMutation(h3, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-v", Value: "text"}}}}, nil)
	if v, ok := h3["X-V"]; !ok || v[0] != "" {
		t.Errorf("value instead of raw_value: %q, want an empty value", v)
	}
}

// TestMutationRules: what mutation_rules allow, ignore or fail.
func TestMutationRules(t *testing.T) {
	rules := &mutationrulesv3.HeaderMutationRules{DisallowSystem: wrapperspb.Bool(true)}
	strict := &mutationrulesv3.HeaderMutationRules{DisallowSystem: wrapperspb.Bool(true), DisallowIsError: wrapperspb.Bool(true)}
	for _, tc := range []struct {
		rules *mutationrulesv3.HeaderMutationRules
		key   string
		want  checkResult
	}{
		{rules, "x-remote-user", checkOK},
		{rules, ":path", checkIgnore},
		{strict, ":path", checkFail},
		{nil, ":path", checkOK},
		{rules, "host", checkIgnore},
		{nil, ":authority", checkIgnore},
		{&mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true)}, "host", checkOK},
		{rules, "x-envoy-original-path", checkIgnore},
		{&mutationrulesv3.HeaderMutationRules{AllowEnvoy: wrapperspb.Bool(true)}, "x-envoy-x", checkOK},
		{&mutationrulesv3.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true)}, "x-a", checkIgnore},
	} {
		if got := checkMutation(tc.rules, tc.key); got != tc.want {
			t.Errorf("%v %s: %d, want %d", tc.rules, tc.key, got, tc.want)
		}
	}
	h := http.Header{}
	if err := applyMutation(h, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHdr("x-a", "bad\nvalue", nil)}}, rules); err == nil {
		t.Error("an invalid header value was accepted")
	}
}
