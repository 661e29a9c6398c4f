package extproc

import (
	"context"
	"net/http"
	"runtime"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/sync/semaphore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The front's own answers (merged discovery, the OpenAPI index and documents) are the only work
// ext_proc does per request that grows with what is asked: negotiating an Accept header of up to
// Envoy's request header limit, serializing a document, marshalling megabytes into the gRPC answer.
// They are built only for a request an apiserver has authorized (discoveryauth.go), and at most
// slots of them at once: an answer waits up to wait for a slot, then gets a 503 with Retry-After
// (client-go retries it), never Envoy's fail-open. Routing decisions take no slot, so however many
// front answers are asked for, the decisions of every other request run beside them on the cores the
// slots leave free.

// slots bounds the front's answers in flight.
type slots struct {
	sem  *semaphore.Weighted
	wait time.Duration
}

// defaultSlots leaves half the cores (at least one answer at a time) to the routing decisions, and
// defaultSlotWait is a fifth of the ext_proc message timeout skewgate gives Envoy (500 ms): a burst (a client reading
// legacy discovery asks for every group-version at once) queues, a flood is refused while Envoy still
// waits for the answer.
func defaultSlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

const defaultSlotWait = 100 * time.Millisecond

func newSlots(n int, wait time.Duration) *slots {
	return &slots{sem: semaphore.NewWeighted(int64(max(1, n))), wait: max(0, wait)}
}

// WithServingSlots sets how many front answers are built and sent at once (at least 1; default half
// of GOMAXPROCS) and how long one waits for a slot before its 503 (default 100ms; 0: no wait).
func WithServingSlots(n int, wait time.Duration) Option {
	return func(s *Server) { s.slots = newSlots(n, wait) }
}

// acquire takes a slot, waiting up to the slots' wait or until ctx ends. release gives it back.
func (l *slots) acquire(ctx context.Context) (release func(), ok bool) {
	release = func() { l.sem.Release(1) }
	if l.sem.TryAcquire(1) {
		return release, true
	}
	if l.wait == 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	if l.sem.Acquire(ctx, 1) != nil {
		return nil, false
	}
	return release, true
}

// busy is the answer to an authorized request no slot came free for: the apiserver's own answer to
// an overloaded server (Retry-After), so clients retry rather than take one apiserver's document.
func busy() *extprocv3.ProcessingResponse {
	return immediate(http.StatusServiceUnavailable, string(metav1.StatusReasonServiceUnavailable),
		"the front is serving too many discovery and OpenAPI answers at once, retry")
}
