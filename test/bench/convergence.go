package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"time"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// convergence is how one way to the apiservers behaved while the only apiserver serving the skewed
// API died by SIGKILL and came back.
type convergence struct {
	Target string `json:"target"`
	// WhileDown counts the answers by status while new was dead (0 = transport error).
	WhileDown map[int]int `json:"whileDown"`
	// FirstCleanMs: from SIGKILL until answers were a prompt 503 (retryable, not a hang or a 404).
	FirstCleanMs float64 `json:"firstCleanMs"`
	// BackMs: from new's /readyz until the skewed API answered 200 again.
	BackMs float64 `json:"backMs"`
}

type poll struct {
	at   time.Time
	code int
	dur  time.Duration
}

// poller GETs url every 20 ms (each with its own 2 s timeout) until stopped.
func poller(ctx context.Context, tc *tls.Config, url string, out *[]poll, mu *sync.Mutex, wg *sync.WaitGroup) {
	defer wg.Done()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 2 * time.Second}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
		start := time.Now()
		code := 0
		if resp, err := c.Do(req); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		mu.Lock()
		*out = append(*out, poll{at: start, code: code, dur: time.Since(start)})
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // pacing the poller
	}
}

// frontTarget names the skewgate front's convergence figures.
const frontTarget = "skewgate front"

func measureConvergence(tb *testbed.Testbed, f *front.Front, tc *tls.Config, logf func(string, ...any)) ([]convergence, error) {
	path := "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
	targets := []struct{ name, url string }{
		{frontTarget, f.URL + path},
		{"old apiserver + in-tree MVP", tb.MustApiserver("old").URL() + path},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var wg sync.WaitGroup
	polls := make([][]poll, len(targets))
	for i, t := range targets {
		wg.Add(1)
		go poller(ctx, tc, t.url, &polls[i], &mu, &wg)
	}
	time.Sleep(500 * time.Millisecond) // a baseline of successes before the kill
	killed := time.Now()
	if err := tb.Kill("new"); err != nil {
		cancel()
		return nil, err
	}
	// Stay down long enough to see the in-tree proxy's behaviour (about 15 s of errors).
	time.Sleep(20 * time.Second)
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := tb.Start(sctx, "new")
	scancel()
	if err != nil {
		cancel()
		return nil, err
	}
	ready := time.Now()
	time.Sleep(10 * time.Second)
	cancel()
	wg.Wait()
	var out []convergence
	for i, t := range targets {
		c := convergence{Target: t.name, WhileDown: map[int]int{}, FirstCleanMs: -1, BackMs: -1}
		for _, p := range polls[i] {
			switch {
			case p.at.After(killed) && p.at.Before(ready):
				c.WhileDown[p.code]++
				if c.FirstCleanMs < 0 && p.code == http.StatusServiceUnavailable && p.dur < 500*time.Millisecond {
					c.FirstCleanMs = float64(p.at.Sub(killed).Milliseconds())
				}
			case p.at.After(ready) && c.BackMs < 0 && p.code == http.StatusOK:
				c.BackMs = float64(p.at.Add(p.dur).Sub(ready).Milliseconds())
			}
		}
		logf("convergence %-30s while down %v, first clean 503 after %.0fms, back %.0fms after /readyz", t.name, c.WhileDown, c.FirstCleanMs, c.BackMs)
		out = append(out, c)
	}
	return out, nil
}
