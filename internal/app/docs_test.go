package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var metricName = regexp.MustCompile(`skewgate_[a-z_]+`)

// definedMetrics are the metric names declared in the components' metrics.go files.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range []string{"discovery", "extproc", "xds", "internal/certs", "internal/grpcutil"} {
		src, err := os.ReadFile(filepath.Join("..", "..", dir, "metrics.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`Name:\s+"(skewgate_[a-z_]+)"`).FindAllSubmatch(src, -1) {
			out[string(m[1])] = true
		}
	}
	if len(out) < 15 {
		t.Fatalf("found only %d metrics", len(out))
	}
	return out
}

// TestMetricsDocumented: every metric is in the README's table, and the dashboard uses only metrics
// that exist.
func TestMetricsDocumented(t *testing.T) {
	defined := definedMetrics(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for m := range defined {
		if !strings.Contains(string(readme), "`"+m) && !strings.Contains(string(readme), m+"`") {
			t.Errorf("metric %s is not in the README's metrics table", m)
		}
	}
	dash, err := os.ReadFile("../../deploy/grafana/skewgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metricName.FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(m, "_bucket")
		if !defined[base] {
			t.Errorf("the dashboard uses %s, which skewgate does not export", m)
		}
	}
}
