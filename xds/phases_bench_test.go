package xds

import "testing"

// Two parts of BenchmarkTranslate1000 on their own: building the clusters (clusters.go), and
// validating every resource (Resources.check).

func BenchmarkTranslateClusters1000(b *testing.B) {
	top := syntheticTopology(1000, 10)
	o := testOptions().WithDefaults()
	b.ReportAllocs()
	for b.Loop() {
		tb := &translator{o: o}
		if _, err := tb.clusters(top); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTranslateCheck1000(b *testing.B) {
	rs, err := Translate(syntheticTopology(1000, 10), testOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := rs.check(); err != nil {
			b.Fatal(err)
		}
	}
}
