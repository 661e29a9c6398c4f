package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/test/testbed"
)

// Client traffic of the co-located restart scenarios: a few workers loop GETs through one front and
// log every call with its start and end, so a phase can tell what clients saw while a part was down
// and what only requests in flight at a kill saw.

// trafficOp is one kind of request.
type trafficOp struct {
	name, path string
	// shared: every apiserver serves it; a front with any apiserver up must answer it 200.
	shared bool
	// method is GET unless set (POST: a create, answered 201).
	method string
}

// want is the status a successful op gets.
func (o trafficOp) want() int {
	if o.method == http.MethodPost {
		return http.StatusCreated
	}
	return http.StatusOK
}

// call is one request's outcome: code 0 is a transport error (refused tells "connection refused").
type call struct {
	op         trafficOp
	start, end time.Time
	code       int
	refused    bool
	err        error
}

type traffic struct {
	mu    sync.Mutex
	calls []call
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startTraffic starts workers that loop over ops against url (by admin token) until stop.
func startTraffic(t *testing.T, tb *testbed.Testbed, url string, workers int, ops []trafficOp) *traffic {
	t.Helper()
	c := httpsClient(t, tb, nil)
	c.Timeout = 10 * time.Second
	tr := &traffic{stop: make(chan struct{})}
	for w := range workers {
		tr.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				op := ops[i%len(ops)]
				start := time.Now()
				code, body, err := do(t, c, http.MethodGet, url+op.path, testbed.AdminToken)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("%d: %.200s", code, body)
				}
				tr.mu.Lock()
				tr.calls = append(tr.calls, call{op: op, start: start, end: time.Now(), code: code, refused: code == 0 && isRefused(err), err: err})
				tr.mu.Unlock()
				if code == 0 {
					time.Sleep(20 * time.Millisecond) // pacing: a refused connection answers at once
				}
			}
		})
	}
	return tr
}

// halt stops the workers and returns every call.
func (tr *traffic) halt() []call {
	close(tr.stop)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.calls)
}

// tally counts calls by what the client saw: an HTTP status, "refused" or "transport error".
type tally map[string]int

func (m tally) add(c call) {
	switch {
	case c.code != 0:
		m[fmt.Sprint(c.code)]++
	case c.refused:
		m["connection refused"]++
	default:
		m["transport error"]++
	}
}

func (m tally) String() string {
	s := ""
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s += fmt.Sprintf(" %s:%d", k, m[k])
	}
	return s
}

// count tallies the calls keep accepts, overall and per op.
func count(calls []call, keep func(call) bool) (all tally, byOp map[string]tally) {
	all, byOp = tally{}, map[string]tally{}
	for _, c := range calls {
		if !keep(c) {
			continue
		}
		all.add(c)
		if byOp[c.op.name] == nil {
			byOp[c.op.name] = tally{}
		}
		byOp[c.op.name].add(c)
	}
	return all, byOp
}

// logFailures logs each distinct failure once with how often it happened.
func logFailures(t *testing.T, phase string, calls []call) {
	t.Helper()
	n := map[string]int{}
	var order []string
	for _, c := range calls {
		if c.err == nil {
			continue
		}
		k := fmt.Sprintf("%s: %v", c.op.name, c.err)
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	for _, k := range order {
		t.Logf("%s: %dx %s", phase, n[k], k)
	}
}

// violations collects the calls that break a phase's rule and reports them in one error: how many,
// by op and outcome, and the first few.
type violations struct {
	phase, want string
	calls       []call
}

func (v *violations) add(c call) { v.calls = append(v.calls, c) }

func (v *violations) report(t *testing.T) {
	t.Helper()
	if len(v.calls) == 0 {
		return
	}
	_, byOp := count(v.calls, func(call) bool { return true })
	first := ""
	for _, c := range v.calls[:min(len(v.calls), 5)] {
		first += fmt.Sprintf("\n  %s %s at %s: %d %v", c.op.name, c.op.path, c.start.Format(time.StampMilli), c.code, c.err)
	}
	t.Errorf("%s: %d requests did not get %s (by op %v); the first:%s", v.phase, len(v.calls), v.want, byOp, first)
}
