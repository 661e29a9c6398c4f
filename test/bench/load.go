package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// target is one way to reach the apiservers.
type target struct {
	name, url string
}

// sample is a latency distribution of one run.
type sample struct {
	Target, Resource, Verb string
	Rate                   int
	Requests, Errors       int
	ByStatus               map[int]int
	P50, P90, P99, Max     float64 // milliseconds
	latencies              []time.Duration
}

func newClient(tc *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
}

// openLoop sends GETs of url at a fixed rate for d and records each latency from the moment the
// request is sent; 50 warm-up requests are not recorded.
func openLoop(c *http.Client, token, url string, rate int, d time.Duration) sample {
	get := func() (int, time.Duration, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json")
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, time.Since(start), err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), nil
	}
	for range 50 {
		get()
	}
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	s := sample{Rate: rate, ByStatus: map[int]int{}, latencies: make([]time.Duration, n)}
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // pacing the open-loop generator
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, lat, _ := get()
			codes[i], s.latencies[i] = code, lat
		}()
	}
	wg.Wait()
	s.Requests = n
	for _, c := range codes {
		s.ByStatus[c]++
		if c != http.StatusOK {
			s.Errors++
		}
	}
	s.summarize()
	return s
}

func (s *sample) summarize() {
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	if len(l) == 0 {
		return
	}
	q := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000 }
	s.P50, s.P90, s.P99, s.Max = q(0.5), q(0.9), q(0.99), float64(l[len(l)-1].Microseconds())/1000
}
