package main

import (
	"os"
	"testing"
)

// The committed extproc.txt parses into every benchmark with its units.
func TestParseBenchmarks(t *testing.T) {
	out := "goos: linux\nBenchmarkDecide-2       \t 8456700\t       140.7 ns/op\t       0 B/op\t       0 allocs/op\n" +
		"BenchmarkProcessLoad/rate=2000/tcp-2 \t 1\t2001448766 ns/op\t 191.0 p50-µs\t 2000 req/s\n" +
		"BenchmarkLeaseChurn-2 \t 100\t 10594783 ns/op\t 1.313 MiB-controller-5000-leases\n"
	got, err := parseBenchmarks(out)
	if err != nil {
		t.Fatal(err)
	}
	if got["BenchmarkDecide"]["ns/op"] != 140.7 || got["BenchmarkProcessLoad/rate=2000/tcp"]["p50-µs"] != 191 || got["BenchmarkLeaseChurn"]["MiB-controller-5000-leases"] != 1.313 || len(got) != 3 {
		t.Errorf("parsed %v", got)
	}
	if _, err := parseBenchmarks("BenchmarkX-2 \t 1\t 3 ns/op\t 4\n"); err == nil || err.Error() != `benchmark line "BenchmarkX-2 \t 1\t 3 ns/op\t 4": values and units do not pair` {
		t.Errorf("an unpaired value: %v", err)
	}
	b, err := os.ReadFile("../../bench/results/extproc.txt")
	if err != nil {
		t.Fatal(err)
	}
	all, err := parseBenchmarks(string(b))
	if err != nil || len(all) < 20 {
		t.Errorf("bench/results/extproc.txt: %d benchmarks, %v", len(all), err)
	}
}

func TestVerdict(t *testing.T) {
	ok := &Results{Latency: []sample{{Target: "c. skewgate front"}}, Convergence: []convergence{{Target: frontTarget, WhileDown: map[int]int{503: 3}}},
		Benchmarks: map[string]map[string]float64{"BenchmarkDecide": {"ns/op": 1}}}
	if f := verdict(ok); len(f) != 0 {
		t.Errorf("a clean run: %v", f)
	}
	bad := &Results{Latency: []sample{{Target: "c. skewgate front", Verb: "GET", Resource: "r", Rate: 5, Errors: 2}, {Target: "b. old", Errors: 9}},
		Convergence: []convergence{{Target: frontTarget, WhileDown: map[int]int{404: 1}}}}
	want := []string{"c. skewgate front GET r at 5/s: 2 errors", "skewgate front answered 404 1 times while the apiserver serving the resource was dead", "no in-process benchmark figures (--extproc)"}
	if f := verdict(bad); len(f) != len(want) || f[0] != want[0] || f[1] != want[1] || f[2] != want[2] {
		t.Errorf("verdict = %q, want %q", f, want)
	}
}
