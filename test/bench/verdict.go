package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// verdict lists what the run shows that README's benchmark section says does not happen; a run
// with any of it did not pass: the skewgate front answered every latency request without error,
// and while the apiserver serving the skewed API was dead it never answered 404.
func verdict(r *Results) []string {
	var failures []string
	for _, s := range r.Latency {
		if strings.HasPrefix(s.Target, "c.") && s.Errors > 0 {
			failures = append(failures, fmt.Sprintf("%s %s %s at %d/s: %d errors", s.Target, s.Verb, s.Resource, s.Rate, s.Errors))
		}
	}
	front := false
	for _, c := range r.Convergence {
		if c.Target == frontTarget {
			front = true
			if n := c.WhileDown[404]; n > 0 {
				failures = append(failures, fmt.Sprintf("%s answered 404 %d times while the apiserver serving the resource was dead", c.Target, n))
			}
		}
	}
	if !front {
		failures = append(failures, "no convergence figures of the skewgate front")
	}
	if len(r.Benchmarks) == 0 {
		failures = append(failures, "no in-process benchmark figures (--extproc)")
	}
	return failures
}

// benchLine is one result line of `go test -bench`: the name (with its -GOMAXPROCS suffix), the
// iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBenchmarks reads `go test -bench` output into name -> unit -> value (ns/op, B/op and every
// unit a benchmark reports itself), so each figure has a JSON path.
func parseBenchmarks(out string) (map[string]map[string]float64, error) {
	res := map[string]map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("benchmark line %q: values and units do not pair", line)
		}
		units := map[string]float64{}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %v", line, err)
			}
			units[f[i+1]] = v
		}
		if _, dup := res[m[1]]; dup {
			return nil, fmt.Errorf("benchmark %s reported twice", m[1])
		}
		res[m[1]] = units
	}
	return res, nil
}
