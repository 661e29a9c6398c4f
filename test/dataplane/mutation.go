package dataplane

import (
	"fmt"
	"net/http"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http/httpguts"
)

type checkResult int

const (
	checkOK checkResult = iota
	checkIgnore
	checkFail
)

// routingHeaders are Checker::getRoutingHeaders: only allow_all_routing lets a processor change
// them.
var routingHeaders = map[string]bool{"host": true, ":authority": true, ":method": true, ":scheme": true}

// checkMutation is Filters::Common::MutationRules::Checker::check (source/extensions/filters/common/
// mutation_rules/mutation_rules.cc): disallow_expression, then allow_expression, disallow_all,
// routing headers unless allow_all_routing, ":"-headers when disallow_system, "x-envoy-" unless
// allow_envoy. A disallowed mutation is ignored, or fails the whole response with
// disallow_is_error.
func checkMutation(rules *mutationrulesv3.HeaderMutationRules, name string) checkResult {
	n := strings.ToLower(name)
	allowed := func() bool {
		if re := rules.GetDisallowExpression(); re != nil && fullMatch(re.Regex, n) {
			return false
		}
		if re := rules.GetAllowExpression(); re != nil && fullMatch(re.Regex, n) {
			return true
		}
		if rules.GetDisallowAll().GetValue() {
			return false
		}
		if !rules.GetAllowAllRouting().GetValue() && routingHeaders[n] {
			return false
		}
		if rules.GetDisallowSystem().GetValue() && strings.HasPrefix(n, ":") {
			return false
		}
		if !rules.GetAllowEnvoy().GetValue() && strings.HasPrefix(n, "x-envoy-") {
			return false
		}
		return true
	}()
	switch {
	case allowed:
		return checkOK
	case rules.GetDisallowIsError().GetValue():
		return checkFail
	}
	return checkIgnore
}

// applyMutation is MutationUtils::applyHeaderMutations (source/extensions/filters/http/ext_proc/
// mutation_utils.cc): removals first, then sets. A set reads the value from raw_value
// (send_header_raw_value) and appends only if the deprecated `append` BoolValue is true; the
// default, and every append_action, replaces (append_action is not read; envoy#36982). Invalid
// names or values and disallowed mutations with disallow_is_error are errors: the caller answers
// 500 whatever failure_mode_allow says (Filter::onReceiveMessage sends an immediate 500 for any
// processing error). Keys are HTTP header names here; ":"-headers are not in h.
func applyMutation(h http.Header, m *extprocv3.HeaderMutation, rules *mutationrulesv3.HeaderMutationRules) error {
	if len(m.GetRemoveHeaders()) > 100 || len(m.GetSetHeaders()) > 100 {
		return fmt.Errorf("header mutation with %d removals and %d sets exceeds the header count limit", len(m.GetRemoveHeaders()), len(m.GetSetHeaders()))
	}
	for _, k := range m.GetRemoveHeaders() {
		if !httpguts.ValidHeaderFieldName(strings.TrimPrefix(k, ":")) {
			return fmt.Errorf("invalid character in remove_headers mutation %q", k)
		}
		switch checkMutation(rules, k) {
		case checkOK:
			if !strings.HasPrefix(k, ":") {
				h.Del(k)
			}
		case checkFail:
			return fmt.Errorf("invalid attempt to remove %s", strings.ToLower(k))
		}
	}
	for _, o := range m.GetSetHeaders() {
		if o.GetHeader() == nil {
			continue
		}
		k := o.Header.Key
		if o.Header.Value != "" && len(o.Header.RawValue) > 0 {
			return fmt.Errorf("header %s: only one of value or raw_value may be set", k)
		}
		val := string(o.Header.RawValue)
		if !httpguts.ValidHeaderFieldName(strings.TrimPrefix(k, ":")) || !httpguts.ValidHeaderFieldValue(val) {
			return fmt.Errorf("invalid character in set_headers mutation %q", k)
		}
		switch checkMutation(rules, k) {
		case checkIgnore:
			continue
		case checkFail:
			return fmt.Errorf("invalid attempt to modify %s", strings.ToLower(k))
		}
		if strings.HasPrefix(k, ":") {
			continue // pseudo-headers are not mutated by the test data plane
		}
		if o.GetAppend().GetValue() {
			h.Add(k, val)
		} else {
			h.Set(k, val)
		}
	}
	return nil
}

// setHeader applies a HeaderValueOption's append_action where Envoy honours it (header_mutation
// filter, health check request_headers_to_add, local reply headers_to_add).
func setHeader(h http.Header, k, val string, action corev3.HeaderValueOption_HeaderAppendAction) {
	switch action {
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		h.Set(k, val)
	case corev3.HeaderValueOption_ADD_IF_ABSENT:
		if _, ok := h[http.CanonicalHeaderKey(k)]; !ok {
			h.Set(k, val)
		}
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		if _, ok := h[http.CanonicalHeaderKey(k)]; ok {
			h.Set(k, val)
		}
	default: // APPEND_IF_EXISTS_OR_ADD
		h.Add(k, val)
	}
}
