package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// TestFailOpenKeepsSkewedRoutes: with ext_proc stopped, hung (connections accepted, never
// answered) and during a restart of skewgate (ext_proc and xDS both away), requests for the skewed
// API go where Envoy's own route table sends them, which is where ext_proc would. README states
// every request of every phase answered 200 (so 0 wrong 404s and 0 503s): the test requires exactly
// that of each request, from the first one sent through ext_proc to the last one after it is back.
// Each phase also proves ext_proc was really out of the path.
func TestFailOpenKeepsSkewedRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Host: 7, Switches: true,
		Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)

	// Objects to read, written while ext_proc is up.
	cs := kubernetes.NewForConfigOrDie(tb.RESTConfig(f.URL, testbed.AdminByToken))
	names := []string{"failopen-a", "failopen-b"}
	for _, n := range names {
		if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, mapObject(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A plain client: client-go would retry 503s (Retry-After) and hide them. By token: failing
	// open, no filter turns a client certificate into an identity.
	c := httpsClient(t, tb, nil)
	base := f.URL + "/apis/" + mapGroup + "/v1/" + mapResource

	phases := []struct {
		name   string
		down   func()
		proven func() int64 // connections the switch turned away or held
	}{
		{"ext_proc stopped", func() { f.ExtProc.Set(front.Refuse) }, f.ExtProc.Refused.Load},
		{"ext_proc hung", func() { f.ExtProc.Set(front.Hang) }, f.ExtProc.Held.Load},
		{"skewgate restarting", func() { f.ExtProc.Set(front.Refuse); f.XDS.Set(front.Refuse) }, f.ExtProc.Refused.Load},
	}
	// awaitDecisions waits until skewgate's ext_proc has decided 20 more requests: it is in the path.
	awaitDecisions := func(what string) {
		t.Helper()
		decided := func() float64 { return metricSum(t, f.Server.Registry, "skewgate_extproc_decisions_total", "") }
		want, deadline := decided()+20, time.Now().Add(time.Minute)
		for decided() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ext_proc decided no 20 requests within a minute", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the counter
		}
	}
	figures := map[string]any{}
	for _, ph := range phases {
		before := ph.proven()
		var rec recorder
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					url, op := base+"?limit=5", "list"
					if (i+w)%2 == 1 {
						url, op = base+"/"+names[i%len(names)], "get"
					}
					code, body, err := do(t, c, http.MethodGet, url, testbed.AdminToken)
					if err == nil && code != http.StatusOK {
						err = fmt.Errorf("%d: %.200s", code, body)
					}
					rec.record(op, code, err)
				}
			}()
		}
		// Traffic through ext_proc first (skewgate's ext_proc decided requests), then the phase's
		// 5 s (its length, as README gives it), then ext_proc back until it decides requests again.
		awaitDecisions(ph.name + ": before")
		ph.down()
		time.Sleep(phaseDown)
		f.ExtProc.Set(front.Forward)
		f.XDS.Set(front.Forward)
		awaitDecisions(ph.name + ": after")
		close(stop)
		wg.Wait()

		byCode, notFound, window := rec.summary()
		t.Logf("%s (%s): %d requests, by status %v, non-2xx window %v, %d ext_proc connections refused or held",
			ph.name, f.DataPlane, len(rec.out), byCode, window.Round(time.Millisecond), ph.proven()-before)
		rec.logDistinctErrors(t)
		figures[ph.name] = map[string]any{"requests": len(rec.out), "by_status": byCode, "wrong_404": len(notFound),
			"non_2xx_window_ms": window.Milliseconds(), "ext_proc_connections_refused_or_held": ph.proven() - before}
		for _, o := range notFound {
			t.Errorf("%s: wrong 404 at %s on %s: %v", ph.name, o.at.Format(time.StampMilli), o.op, o.err)
		}
		// README: all 200. Anything else (a 503, a transport error: status 0) breaks the claim.
		if n := len(rec.out) - byCode[http.StatusOK]; n != 0 {
			t.Errorf("%s: %d of %d requests were not answered 200 (by status %s; 0 = transport error), want every one 200",
				ph.name, n, len(rec.out), byStatus(byCode))
		}
		if ph.proven()-before == 0 {
			t.Errorf("%s: the switch never turned ext_proc away: the phase proves nothing", ph.name)
		}
	}
	writeResults(t, &env{tb: tb, f: f}, figures)
}

// phaseDown is how long each fail-open phase keeps ext_proc away (README: 5 s each).
const phaseDown = 5 * time.Second
