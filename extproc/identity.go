package extproc

import (
	"fmt"
	"net/http"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/internal/wire"
)

// Identity is not ext_proc's. Envoy's Lua filter before it sets X-Remote-User/Group/Uid/Extra-* from
// the client certificate Envoy verified, in the same request and with no external call, so a
// certificate user keeps its identity while this service is down, restarting or slow (the xds
// package's identity.lua; docs/security.md "Who sets identity"). The listener's strip filter
// removed every client copy before that. This service neither sets nor removes those headers (its
// mutation rules forbid it: xds extProcFilter), and it does not see the client certificate at all
// (X-Forwarded-Client-Cert is not forwarded to it). Whether a request is anonymous it learns from the
// route Envoy chose from the request as it arrived (wire.CredentialsMetadata), never from a header.

// setHeader is a header mutation entry in the form Envoy's ext_proc filter reads. Its mutation code
// (source/extensions/filters/http/ext_proc/mutation_utils.cc, MutationUtils::applyHeaderMutations)
// reads only the deprecated `append` BoolValue: unset or false replaces every value of the header,
// true adds one more; `append_action` is never read (envoy issue 36982; the pull requests that
// would read it, 37139 and 39066, were closed unmerged). So every entry carries `append`
// explicitly and leaves `append_action` at its zero value.
func setHeader(key, value string, appendValue bool) *corev3.HeaderValueOption {
	a := appendNo
	if appendValue {
		a = appendYes
	}
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}, Append: a}
}

// appendNo and appendYes are shared by every mutation: gRPC only reads them when it marshals.
var appendNo, appendYes = wrapperspb.Bool(false), wrapperspb.Bool(true)

// refusalReason is the label a refusal marker's value counts under: one of
// wire.IdentityRefusalReasons, else wire.IdentityRefusalOther, so the label set stays bounded
// whatever the header holds.
func refusalReason(v string) string {
	if slices.Contains(wire.IdentityRefusalReasons, v) {
		return v
	}
	return wire.IdentityRefusalOther
}

// refuseIdentity answers a request the identity filter marked (wire.IdentityRefusedHeader): its
// certificate was verified, but the front cannot give it exactly the identity the apiserver would,
// and it never sends less or different identity on. A 503 with Retry-After, as an apiserver's own
// metav1.Status; the Lua filter after ext_proc answers the same when this service does not.
func (s *Server) refuseIdentity(marker string) *extprocv3.ProcessingResponse {
	reason := refusalReason(marker)
	s.metrics.identityRefused.WithLabelValues(reason).Inc()
	return immediate(http.StatusServiceUnavailable, string(metav1.StatusReasonServiceUnavailable),
		fmt.Sprintf("the front cannot derive this client certificate's identity exactly (%s); it was not sent, use an apiserver directly", reason))
}
