package extproc

import (
	"sync/atomic"

	"github.com/skewgate/skewgate/discovery"
)

// perTopology holds what the server derives from one Topology (its merged discovery answers, its
// cluster names, its OpenAPI answers), built by the first request that sees a new Topology version
// and shared by every request until the next one. Requests racing on a new version may each build
// it, but only one value is stored and every one of them gets that one, so whatever the value starts
// (the OpenAPI warm) starts once per stored version.
type perTopology[T any] struct {
	p atomic.Pointer[versioned[T]]
}

type versioned[T any] struct {
	version string
	v       T
}

func (m *perTopology[T]) get(t *discovery.Topology, build func(*discovery.Topology) T) T {
	e := m.p.Load()
	if e != nil && e.version == t.Version {
		return e.v
	}
	n := &versioned[T]{version: t.Version, v: build(t)}
	for !m.p.CompareAndSwap(e, n) {
		// Another request stored first: its value if it is of the same version; else ours
		// replaces it, as the last Topology seen wins.
		if e = m.p.Load(); e != nil && e.version == t.Version {
			return e.v
		}
	}
	return n.v
}

// load returns the value built last, or the zero value.
func (m *perTopology[T]) load() T {
	if e := m.p.Load(); e != nil {
		return e.v
	}
	var zero T
	return zero
}
