package xds

import "testing"

// BenchmarkSkewRoutes50: the skew routes alone (with their anonymous twins) for 50+ skewed resources.
func BenchmarkSkewRoutes50(b *testing.B) {
	top := skewedTopology(50)
	tb := &translator{o: testOptions().WithDefaults(), top: top}
	retry, err := retryPolicy()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		rs, _, err := tb.tableRoutes(retry, nil)
		if err != nil {
			b.Fatal(err)
		}
		n = len(rs)
	}
	b.ReportMetric(float64(n), "routes")
	b.ReportMetric(float64(len(top.Skewed())), "resources")
}
