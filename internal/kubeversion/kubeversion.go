// Package kubeversion orders apiserver versions (their /version gitVersion, parsed by
// k8s.io/apimachinery's util/version) the one way discovery and openapi both choose by: newest first.
package kubeversion

import utilversion "k8s.io/apimachinery/pkg/util/version"

// NewerFirst orders a before b when a is newer; an unparsable version (nil) is the oldest.
func NewerFirst(a, b *utilversion.Version) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	case b.LessThan(a):
		return -1
	case a.LessThan(b):
		return 1
	}
	return 0
}
