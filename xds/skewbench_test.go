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

// BenchmarkRouteTable1000: the whole route table (base routes and every row of the decision table,
// with their twins) of 1000 upstreams in 10 versions.
func BenchmarkRouteTable1000(b *testing.B) {
	tb := &translator{o: testOptions().WithDefaults(), top: syntheticTopology(1000, 10)}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		rc, _, err := tb.routeConfig()
		if err != nil {
			b.Fatal(err)
		}
		n = len(rc.VirtualHosts[0].Routes)
	}
	b.ReportMetric(float64(n), "routes")
}
