package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func write(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), j, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latency.svg"), []byte(latencySVG(r)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(r)), 0o644)
}

func find(r *Results, prefix, resource, verb string, rate int) *sample {
	for i := range r.Latency {
		s := &r.Latency[i]
		if strings.HasPrefix(s.Target, prefix) && s.Resource == resource && s.Verb == verb && s.Rate == rate {
			return s
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func markdown(r *Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# skewgate benchmark\n\n%s on %s; front data plane: %s.\n\n", r.Date.Format(time.RFC3339), r.Machine, r.DataPlane)
	verdict := "passed"
	if !r.Passed {
		verdict = "FAILED: " + strings.Join(r.Failures, "; ")
	}
	dirty := ""
	if r.Dirty {
		dirty = " (dirty tree: the figures describe no commit)"
	}
	fmt.Fprintf(&b, "Commit %s%s; %s.\n\n", r.Commit, dirty, verdict)
	fmt.Fprintf(&b, "Targets: (a) the v1.36 apiserver directly, the floor; (b) the v1.35 apiserver with the in-tree Mixed Version Proxy, which proxies to v1.36; (c) the skewgate front. Latency in ms from sending a request to its full answer, fixed-rate open loop.\n\n")
	fmt.Fprintf(&b, "## Latency\n\n| resource | verb | rate/s | target | p50 | p90 | p99 | errors | p50 c/b | p99 c/b | p50 c/a | p99 c/a |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Latency {
		row := fmt.Sprintf("| %s | %s | %d | %s | %.2f | %.2f | %.2f | %d |", s.Resource, s.Verb, s.Rate, s.Target, s.P50, s.P90, s.P99, s.Errors)
		if strings.HasPrefix(s.Target, "c.") {
			a, bb := find(r, "a.", s.Resource, s.Verb, s.Rate), find(r, "b.", s.Resource, s.Verb, s.Rate)
			cb50, cb99 := "-", "-"
			if bb != nil {
				cb50, cb99 = ratio(s.P50, bb.P50), ratio(s.P99, bb.P99)
			}
			row += fmt.Sprintf(" %s | %s | %s | %s |", cb50, cb99, ratio(s.P50, a.P50), ratio(s.P99, a.P99))
		} else {
			row += " | | | |"
		}
		b.WriteString(row + "\n")
	}
	fmt.Fprintf(&b, "\n## Convergence: SIGKILL of the only apiserver serving mutatingadmissionpolicies, then restart\n\n| target | answers while down (status: count, 0 = timeout/transport error) | first prompt 503 after SIGKILL (ms) | /readyz to success (ms) |\n|---|---|---|---|\n")
	for _, c := range r.Convergence {
		var codes []int
		for k := range c.WhileDown {
			codes = append(codes, k)
		}
		slices.Sort(codes)
		var parts []string
		for _, k := range codes {
			parts = append(parts, fmt.Sprintf("%d: %d", k, c.WhileDown[k]))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f |\n", c.Target, strings.Join(parts, ", "), c.FirstCleanMs, c.BackMs)
	}
	fmt.Fprintf(&b, "\n## Scale (synthetic, 600 resources per upstream)\n\n| upstreams | capability versions | clusters | Topology build (ms) | translation (ms) | snapshot (KiB) | control-plane RSS (MiB) |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.Scale {
		fmt.Fprintf(&b, "| %d | %d | %d | %.2f | %.2f | %d | %d |\n", s.Upstreams, s.Sets, s.Clusters, s.BuildMs, s.TranslateMs, s.SnapshotKiB, s.RSSMiB)
	}
	if r.ExtProc != "" {
		fmt.Fprintf(&b, "\n## In-process benchmarks (`go test -bench` in extproc, xds, discovery and openapi; see the Makefile's bench target)\n\n```\n%s```\n", r.ExtProc)
	}
	return b.String()
}

// latencySVG draws the latency CDF of GET mutatingadmissionpolicies at the middle rate per target.
func latencySVG(r *Results) string {
	const w, h, pad = 720, 400, 50
	var rates []int
	for _, s := range r.Latency {
		if !slices.Contains(rates, s.Rate) {
			rates = append(rates, s.Rate)
		}
	}
	if len(rates) == 0 {
		return "<svg xmlns='http://www.w3.org/2000/svg'/>"
	}
	rate := rates[len(rates)/2]
	var series []*sample
	maxMs := 0.0
	for i := range r.Latency {
		s := &r.Latency[i]
		if s.Resource == "mutatingadmissionpolicies" && s.Verb == "GET" && s.Rate == rate && len(s.latencies) > 0 {
			series = append(series, s)
			if s.P99 > maxMs {
				maxMs = s.P99
			}
		}
	}
	maxMs *= 1.2
	colors := []string{"#1b9e77", "#d95f02", "#7570b3"}
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' font-size='12'>\n", w, h)
	fmt.Fprintf(&b, "<rect width='100%%' height='100%%' fill='white'/>\n<text x='%d' y='20'>Latency CDF, GET mutatingadmissionpolicies at %d/s (%s)</text>\n", pad, rate, r.DataPlane)
	fmt.Fprintf(&b, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/><line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n", pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	for i := 0; i <= 4; i++ {
		x := pad + i*(w-2*pad)/4
		fmt.Fprintf(&b, "<text x='%d' y='%d' text-anchor='middle'>%.1f ms</text>\n", x, h-pad+16, maxMs*float64(i)/4)
		y := h - pad - i*(h-2*pad)/4
		fmt.Fprintf(&b, "<text x='%d' y='%d' text-anchor='end'>%d%%</text>\n", pad-4, y+4, i*25)
	}
	for i, s := range series {
		l := slices.Clone(s.latencies)
		slices.Sort(l)
		var pts []string
		for k, d := range l {
			ms := float64(d.Microseconds()) / 1000
			if ms > maxMs {
				break
			}
			x := float64(pad) + ms/maxMs*float64(w-2*pad)
			y := float64(h-pad) - float64(k+1)/float64(len(l))*float64(h-2*pad)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, "<polyline fill='none' stroke='%s' stroke-width='2' points='%s'/>\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, "<text x='%d' y='%d' fill='%s'>%s</text>\n", pad+10, pad+16*(i+1), c, s.Target)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
