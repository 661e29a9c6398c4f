package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
)

// What a 503 on the wire was: one of these, told apart by body and header.
//
//   - neverSent: Envoy's own local reply for a request that provably never reached an apiserver
//     (response flags UH, UF, NC), rewritten by the connection manager's local_reply_config into a
//     metav1.Status with Retry-After: 1 (xds/listener.go, neverSentReply). Its message carries
//     Envoy's %RESPONSE_CODE_DETAILS%, which names why: "no_healthy_upstream" (UH),
//     "cluster_not_found" (NC), "upstream_reset_before_response_started{connection_failure...}"
//     (UF; Envoy appends ",<transport failure reason>" when it has one). The detail values are
//     ResponseCodeDetailValues in envoy/stream_info/stream_info.h (read at envoyproxy/envoy
//     0034b6fd10, a main-branch copy: the search index holds no copy at a release tag), and the UF
//     form is built in source/common/router/router.cc, Filter::onUpstreamReset (read in a stored
//     copy whose commit the search index does not name).
//   - skewgate: skewgate's own decision (ext_proc's immediate response or the route table's
//     direct response for an "unavailable" resource, or a cluster not yet in every Envoy): a
//     metav1.Status too, with Retry-After: 1, whose message names the resource.
//   - shuttingDown: an apiserver's own refusal once its graceful shutdown has begun: it answers
//     every request that is not long-running, before any handler runs, with a metav1.Status
//     ServiceUnavailable "apiserver is shutting down" and Retry-After: 1 (k8s.io/apiserver
//     pkg/server/filters/waitgroup.go, WithWaitGroup and waitGroupWriteRetryAfterToResponse).
//     Until Envoy's health checks take it out, the front still sends it requests.
//   - other: anything else, another 503 of an apiserver or Envoy's reply to a reset after the
//     request was sent (plain text, no Retry-After): the request may have reached an apiserver.
const (
	neverSentKind    = "envoy: never sent"
	skewgateKind     = "skewgate: unavailable"
	shuttingDownKind = "apiserver: shutting down"
	otherKind        = "other"
)

// neverSentMessage is the mapper's message around %RESPONSE_CODE_DETAILS%.
const (
	neverSentPrefix = "no apiserver could take the request ("
	neverSentSuffix = "); it was not sent, retry"
)

// neverSentDetail tells the response code details of the flags the mapper matches (UH, NC, UF).
func neverSentDetail(d string) bool {
	return d == "no_healthy_upstream" || d == "cluster_not_found" ||
		strings.HasPrefix(d, "upstream_reset_before_response_started{connection_failure") && strings.HasSuffix(d, "}")
}

// reply503 is one 503 seen on the wire.
type reply503 struct {
	Kind       string `json:"kind"`
	RetryAfter string `json:"retry_after"`
	Reason     string `json:"reason"`
	Details    string `json:"details,omitempty"` // Envoy's response code details, for neverSentKind
	Message    string `json:"message"`
	Op         string `json:"request"`
}

// classify503 reads a 503's body and Retry-After header.
func classify503(op string, h http.Header, body []byte) reply503 {
	r := reply503{Kind: otherKind, RetryAfter: h.Get("Retry-After"), Op: op}
	var st struct {
		Kind, APIVersion, Status, Reason, Message string
		Code                                      int
	}
	if json.Unmarshal(body, &st) != nil || st.Kind != "Status" || st.APIVersion != "v1" || st.Status != "Failure" || st.Code != 503 {
		r.Message = fmt.Sprintf("%.200s", body)
		return r
	}
	r.Reason, r.Message = st.Reason, st.Message
	if st.Reason != "ServiceUnavailable" {
		return r
	}
	if d, ok := strings.CutPrefix(st.Message, neverSentPrefix); ok {
		if d, ok = strings.CutSuffix(d, neverSentSuffix); ok && neverSentDetail(d) {
			r.Kind, r.Details = neverSentKind, d
		}
		return r
	}
	if st.Message == "apiserver is shutting down" {
		r.Kind = shuttingDownKind
		return r
	}
	if strings.HasPrefix(st.Message, "no apiserver that serves ") || strings.HasPrefix(st.Message, "routing to the apiservers that serve ") {
		r.Kind = skewgateKind
	}
	return r
}

// statusCounts counts every HTTP exchange client-go makes by status (0: transport error), retries
// included: client-go retries a 503 with Retry-After itself, so a caller never sees those. Each 503
// is kept with its body and Retry-After, to tell whose it was.
type statusCounts struct {
	mu      sync.Mutex
	byCode  map[int]int
	replies []reply503
}

func (s *statusCounts) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		code := 0
		if err == nil {
			code = resp.StatusCode
		}
		var rep *reply503
		if code == http.StatusServiceUnavailable {
			// Read the whole body and hand client-go a copy: it reads the Status itself.
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			c := classify503(r.Method+" "+r.URL.Path, resp.Header, body)
			if rerr != nil {
				c.Kind, c.Message = otherKind, "reading the body: "+rerr.Error()
			}
			rep = &c
		}
		s.mu.Lock()
		if s.byCode == nil {
			s.byCode = map[int]int{}
		}
		s.byCode[code]++
		if rep != nil {
			s.replies = append(s.replies, *rep)
		}
		s.mu.Unlock()
		return resp, err
	})
}

func (s *statusCounts) snapshot() (map[int]int, []reply503) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.byCode), append([]reply503(nil), s.replies...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
