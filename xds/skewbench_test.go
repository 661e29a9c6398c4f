package xds

import "testing"

// BenchmarkTranslate1000x10: 1000 upstreams in 10 versions, 45 skewed resources.
func BenchmarkTranslate1000x10(b *testing.B) {
	top := syntheticTopology(1000, 10)
	o := testOptions()
	b.ReportAllocs()
	var rs *Resources
	for b.Loop() {
		var err error
		if rs, err = Translate(top, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rs.Clusters)), "clusters")
	b.ReportMetric(float64(len(rs.Routes[0].VirtualHosts[0].Routes)), "routes")
}

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
		rs, err := tb.skewTable(retry, nil)
		if err != nil {
			b.Fatal(err)
		}
		n = len(rs)
	}
	b.ReportMetric(float64(n), "routes")
	b.ReportMetric(float64(len(top.Skewed())), "resources")
}
