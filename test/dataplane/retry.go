package dataplane

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// attempts sends a request to a host of the cluster and retries as the route's retry policy says
// (source/common/router/retry_state_impl.cc): only for the retry_on conditions listed
// (connect-failure: the connection failed; refused-stream: HTTP/2 REFUSED_STREAM; reset: any reset;
// 5xx / gateway-error: such a response), at most num_retries times (default 1 when a policy exists),
// with jittered exponential back-off from 25 ms, on a host the previous_hosts predicate accepts
// (host_selection_retry_max_attempts re-picks). Without a policy nothing is retried.
type attempts struct {
	d      *DataPlane
	c      *cluster
	policy *routev3.RetryPolicy
}

func (a *attempts) retryOn(cond string) bool {
	for _, t := range strings.Split(a.policy.GetRetryOn(), ",") {
		if t = strings.TrimSpace(t); t == cond || cond != "5xx" && cond != "gateway-error" && t == "reset" {
			return true
		}
	}
	return false
}

func (a *attempts) previousHosts() bool {
	for _, p := range a.policy.GetRetryHostPredicate() {
		if p.Name == "envoy.retry_host_predicates.previous_hosts" {
			return true
		}
	}
	return false
}

// noRetryBody is an empty request body that Go's HTTP/2 transport cannot rewind, so that it does
// not retry a refused stream on its own: retries are the route's business.
type noRetryBody struct{}

func (noRetryBody) Read([]byte) (int, error) { return 0, io.EOF }
func (noRetryBody) Close() error             { return nil }

func (a *attempts) RoundTrip(req *http.Request) (*http.Response, error) {
	tries := 1
	if a.policy != nil {
		tries += 1
		if n := a.policy.GetNumRetries(); n != nil {
			tries = 1 + int(n.Value)
		}
	}
	var tried map[*host]bool
	if a.previousHosts() {
		tried = map[*host]bool{}
	}
	bodyless := req.Body == nil || req.Body == http.NoBody
	var lastErr error = errNoHealthyUpstream
	for attempt := 0; attempt < tries; attempt++ {
		if attempt > 0 {
			if !bodyless {
				return nil, lastErr // the body was consumed; Envoy would have buffered it
			}
			mult := min(1<<attempt-1, 10)
			time.Sleep(time.Duration(a.d.intn(25*mult)+1) * time.Millisecond)
		}
		h := a.c.chooseHost(tried, int(a.policy.GetHostSelectionRetryMaxAttempts()))
		if h == nil {
			return nil, errNoHealthyUpstream
		}
		if tried != nil {
			tried[h] = true
		}
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host = h.scheme, h.addr
		if bodyless && !a.c.http1 && !isUpgrade(req) {
			out.Body = noRetryBody{}
		}
		h.active.Add(1)
		resp, err := h.tr.RoundTrip(out)
		if err == nil {
			if a.c.od != nil {
				a.c.od.connected(h)
				a.c.od.httpStatus(h, resp.StatusCode)
			}
			gw := resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504
			if attempt < tries-1 && bodyless && (resp.StatusCode >= 500 && a.retryOn("5xx") || gw && a.retryOn("gateway-error")) {
				resp.Body.Close()
				h.active.Add(-1)
				lastErr = &localError{code: resp.StatusCode, details: "retried"}
				continue
			}
			resp.Body = &countedBody{ReadCloser: resp.Body, h: h}
			return resp, nil
		}
		h.active.Add(-1)
		if req.Context().Err() != nil {
			return nil, err
		}
		if a.c.od != nil {
			a.c.od.connectFailed(h) // every upstream reset is LOCAL_ORIGIN_CONNECT_FAILED (router.cc)
		}
		lastErr = err
		cond := "reset"
		switch {
		case connectFailure(err):
			cond = "connect-failure"
		case refusedStream(err):
			cond = "refused-stream"
		}
		if !a.retryOn(cond) {
			return nil, err
		}
	}
	return nil, lastErr
}

// countedBody ends a host's active request when the response is done; a 101 body is also a writer.
type countedBody struct {
	io.ReadCloser
	h    *host
	done bool
}

func (b *countedBody) Close() error {
	if !b.done {
		b.done = true
		b.h.active.Add(-1)
	}
	return b.ReadCloser.Close()
}

func (b *countedBody) Write(p []byte) (int, error) {
	if w, ok := b.ReadCloser.(io.Writer); ok {
		return w.Write(p)
	}
	return 0, errors.New("not an upgraded connection")
}

// connectFailure: the request never reached the upstream (dial or TLS handshake failed).
func connectFailure(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return true
	}
	var re tls.RecordHeaderError
	return errors.As(err, &re)
}

// refusedStream: the HTTP/2 upstream refused the stream (RST_STREAM REFUSED_STREAM).
func refusedStream(err error) bool {
	return strings.Contains(err.Error(), "REFUSED_STREAM")
}
