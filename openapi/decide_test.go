package openapi

import (
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Group order: highest version (unparsable lowest), then most members, then smallest hash.
func TestCompareOpenAPIGroups(t *testing.T) {
	v := func(s string) *utilversion.Version { x, _ := utilversion.ParseGeneric(s); return x }
	ordered := []*group{
		{hash: "Z", size: 1, version: v("v1.36.3")},
		{hash: "B", size: 2, version: v("v1.35.4")},
		{hash: "A", size: 1, version: v("v1.35.4")},
		{hash: "C", size: 1, version: v("v1.35.4")},
		{hash: "D", size: 5, version: nil}, // "garbage"
	}
	for i := range ordered {
		for j := range ordered {
			if got := compareGroups(ordered[i], ordered[j]); (got < 0) != (i < j) || (got == 0) != (i == j) {
				t.Errorf("compare(%s, %s) = %d", ordered[i].hash, ordered[j].hash, got)
			}
		}
	}
}
