package kubeversion

import (
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

func TestNewerFirst(t *testing.T) {
	v := func(s string) *utilversion.Version { return utilversion.MustParseGeneric(s) }
	for _, c := range []struct {
		a, b *utilversion.Version
		want int
	}{
		{v("1.36.3"), v("1.35.4"), -1},
		{v("1.35.4"), v("1.36.3"), 1},
		{v("1.36.3"), v("1.36.3"), 0},
		{v("1.36.10"), v("1.36.9"), -1}, // numeric, not lexical
		{nil, v("1.0.0"), 1},            // unparsable is the oldest
		{v("1.0.0"), nil, -1},
		{nil, nil, 0},
	} {
		if got := NewerFirst(c.a, c.b); got != c.want {
			t.Errorf("NewerFirst(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
