package dataplane

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// deadAddr is a loopback port with nothing listening.
func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := lis.Addr().String()
	lis.Close()
	return a
}

// TestRetriesOnlyWhereTheRouteSays: a cluster with a live and a dead host (no health check):
// a route with retry_on connect-failure and previous_hosts always reaches the live host; a route
// without a retry policy answers 503 UF whenever the dead host is picked.
func TestRetriesOnlyWhereTheRouteSays(t *testing.T) {
	a := newUpstream(t, "a")
	withRetry := routeTo("retry", "a", exact("x-retry", "1"))
	withRetry.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream", NumRetries: wrapperspb.UInt32(2),
		HostSelectionRetryMaxAttempts: 3, RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts"}}}
	c := plainCluster("a", a.addr(), deadAddr(t))
	c.ConnectTimeout = durationpb.New(200 * time.Millisecond)
	f := startFront(t, Delta, listener(t, nil), routes(withRetry, routeTo("no-retry", "a")), c)
	f.waitActive("a")
	cl := f.client(false)
	for i := range 30 {
		if code, _ := get(t, cl, f.url("/"), "x-retry", "1"); code != 200 {
			t.Fatalf("request %d with connect-failure retries: %d", i, code)
		}
	}
	failed := 0
	for range 30 {
		if code, _ := get(t, cl, f.url("/")); code == 503 {
			failed++
		}
	}
	// Each request picks the dead host with probability 1/2: none in 30 is 2^-30.
	if failed == 0 || failed == 30 {
		t.Errorf("without a retry policy %d of 30 requests failed; want some (dead host picked, not retried) but not all", failed)
	}
}

// TestRetryConditions: which failures each retry_on token covers.
func TestRetryConditions(t *testing.T) {
	a := &attempts{policy: &routev3.RetryPolicy{RetryOn: "connect-failure"}}
	if !a.retryOn("connect-failure") || a.retryOn("refused-stream") {
		t.Error("connect-failure only")
	}
	a.policy.RetryOn = "reset"
	if !a.retryOn("connect-failure") || !a.retryOn("refused-stream") || a.retryOn("5xx") {
		t.Error("reset covers resets, not responses")
	}
	if !refusedStream(errors.New("stream error: stream ID 3; REFUSED_STREAM")) || refusedStream(errors.New("EOF")) {
		t.Error("refused-stream classification")
	}
	none := &attempts{}
	if none.retryOn("connect-failure") {
		t.Error("no policy retried")
	}
}

// TestRetriesReplayTheBufferedBody: Envoy buffers a request body for the route's retries (up to the
// decoder buffer limit, 1 MiB by default), so a write whose connection failed is sent again, body
// and all, to another host; past the limit it gives up the retries and the write is answered 503.
func TestRetriesReplayTheBufferedBody(t *testing.T) {
	a := newUpstream(t, "a")
	withRetry := routeTo("retry", "a")
	withRetry.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream", NumRetries: wrapperspb.UInt32(2),
		HostSelectionRetryMaxAttempts: 3, RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts"}}}
	c := plainCluster("a", a.addr(), deadAddr(t))
	c.ConnectTimeout = durationpb.New(200 * time.Millisecond)
	f := startFront(t, Delta, listener(t, nil), routes(withRetry), c)
	f.waitActive("a")
	cl := f.client(false)
	post := func(body []byte) int {
		req, err := http.NewRequest(http.MethodPost, f.url("/apis/x/v1/things"), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	small := bytes.Repeat([]byte("k"), 64<<10)
	for i := range 20 {
		if code := post(small); code != 200 {
			t.Fatalf("write %d (64 KiB) with connect-failure retries: %d", i, code)
		}
	}
	if got := a.bodyBytes(); got != 20*int64(len(small)) {
		t.Errorf("the live host received %d body bytes, want %d: a retried body was not sent whole", got, 20*len(small))
	}
	big := bytes.Repeat([]byte("k"), retryBufferLimit+1)
	failed := 0
	for range 20 {
		switch code := post(big); code {
		case 507: // Envoy's "exceeded request buffer limit while retrying upstream", no flag
			failed++
		case 200:
		default:
			t.Errorf("a write over the buffer limit answered %d, want 200 or 507", code)
		}
	}
	// Past the buffer limit nothing is retried: each write picks the dead host with probability 1/2.
	if failed == 0 || failed == 20 {
		t.Errorf("%d of 20 writes over the buffer limit failed; want some (not retried) but not all", failed)
	}
}

func TestRefusedStreamClassification(t *testing.T) {
	for err, want := range map[string]bool{
		"stream error: stream ID 3; REFUSED_STREAM": true,
		"http2: Transport: cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY] after Request.Body was written; define Request.GetBody to avoid this error": true,
		"http2: server sent GOAWAY and closed the connection; LastStreamID=5, ErrCode=NO_ERROR, debug=\"\"":                                                                           false,
		"EOF": false,
	} {
		if got := refusedStream(errors.New(err)); got != want {
			t.Errorf("refusedStream(%q) = %v, want %v", err, got, want)
		}
	}
}
