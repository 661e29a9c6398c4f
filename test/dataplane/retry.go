package dataplane

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
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
//
// A request body is buffered for the retries up to retryBufferLimit; past it the retries are given
// up and the body streams to the one attempt (Filter::decodeData in source/common/router/router.cc:
// retry_shadow_buffer_limit_ is the stream's decoder buffer limit, the listener's
// per_connection_buffer_limit_bytes, 1 MiB when unset as in skewgate's listener). Envoy streams the
// first attempt while it buffers; the stand-in reads the buffered body first: the same attempts, a
// little later.
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

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// retryBufferLimit is the listener's default per_connection_buffer_limit_bytes (1 MiB), which
// skewgate's listener leaves unset.
const retryBufferLimit = 1 << 20

func (a *attempts) RoundTrip(req *http.Request) (*http.Response, error) {
	tries := 1
	if a.policy != nil {
		tries += 1
		if n := a.policy.GetNumRetries(); n != nil {
			tries = 1 + int(n.Value)
		}
	}
	bodyless := req.Body == nil || req.Body == http.NoBody
	var body []byte   // buffered for the retries; nil: bodyless, or streamed without retries
	overflow := false // the body outgrew the retry buffer
	if !bodyless && tries > 1 {
		b, err := io.ReadAll(io.LimitReader(req.Body, retryBufferLimit+1))
		if err != nil {
			return nil, err
		}
		if len(b) <= retryBufferLimit {
			body = b
		} else {
			tries, overflow = 1, true // over the buffer limit: no retry, the rest streams
			req.Body = readCloser{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
		}
	}
	replayable := bodyless || body != nil
	var tried map[*host]bool
	if a.previousHosts() {
		tried = map[*host]bool{}
	}
	var lastErr error = errNoHealthyUpstream
	for attempt := 0; attempt < tries; attempt++ {
		if attempt > 0 {
			if !replayable {
				return nil, lastErr
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
		switch {
		case body != nil:
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		case bodyless && !a.c.http1 && !isUpgrade(req):
			out.Body = noRetryBody{}
		}
		if a.c.od != nil {
			// LOCAL_ORIGIN_CONNECT_SUCCESS when the stream has its connection (onPoolReady).
			out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
				GotConn: func(httptrace.GotConnInfo) { a.c.od.connected(h) },
			}))
		}
		h.active.Add(1)
		resp, err := h.tr.RoundTrip(out)
		if err == nil {
			a.c.onUpstreamHeaders(h, resp) // upstream filters, then x-envoy-immediate-health-check-fail
			if a.c.od != nil {
				a.c.od.httpStatus(h, resp.StatusCode)
			}
			gw := resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504
			if attempt < tries-1 && replayable && (resp.StatusCode >= 500 && a.retryOn("5xx") || gw && a.retryOn("gateway-error")) {
				resp.Body.Close()
				h.active.Add(-1)
				lastErr = &localError{code: resp.StatusCode, details: "retried"}
				continue
			}
			resp.Body = &countedBody{ReadCloser: resp.Body, h: h, od: a.c.od, req: req}
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
		if overflow {
			// Envoy streams the first attempt while it buffers; when that attempt failed in a way the
			// policy retries and the body then outgrows the buffer during the back-off, it answers 507
			// with no response flag (Filter::decodeData). The stand-in reads the body first, so it
			// answers that 507 whenever the attempt failed retriably: never kinder than Envoy, whose
			// other outcome (retries given up before the failure) is a 503 with its flag.
			return nil, &localError{code: http.StatusInsufficientStorage, details: "request_payload_exceeded_retry_buffer_limit"}
		}
	}
	return nil, lastErr
}

// countedBody ends a host's active request when the response is done; a 101 body is also a writer.
// A body the upstream breaks off is a reset after the headers, which the router reports as
// LOCAL_ORIGIN_CONNECT_FAILED like one before them (router.cc, Filter::onUpstreamReset); one the
// downstream gave up on is not reported.
type countedBody struct {
	io.ReadCloser
	h      *host
	od     *outlier
	req    *http.Request
	done   bool
	failed bool
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.failed && !b.done && b.od != nil && b.req.Context().Err() == nil {
		b.failed = true
		b.od.connectFailed(b.h)
	}
	return n, err
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

// refusedStream: the HTTP/2 upstream refused the stream: RST_STREAM REFUSED_STREAM, or a stream past
// the last one a GOAWAY accepted, which Go's transport ends with "received Server's graceful shutdown
// GOAWAY" and Envoy's codec closes as refused (RemoteRefusedStreamReset). A stream the GOAWAY did
// accept and that then failed ("server sent GOAWAY and closed the connection") may have been
// processed, and is not refused.
func refusedStream(err error) bool {
	s := err.Error()
	return strings.Contains(s, "REFUSED_STREAM") || strings.Contains(s, "graceful shutdown GOAWAY")
}
