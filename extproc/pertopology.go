package extproc

import (
	"sync/atomic"

	"github.com/skewgate/skewgate/discovery"
)

// perTopology holds what the server derives from one Topology (its merged discovery answers, its
// cluster names), built by the first request that sees a new Topology version and shared by every
// request until the next one. Requests racing on a new version may each build it; one wins.
type perTopology[T any] struct {
	p atomic.Pointer[versioned[T]]
}

type versioned[T any] struct {
	version string
	v       T
}

func (m *perTopology[T]) get(t *discovery.Topology, build func(*discovery.Topology) T) T {
	if e := m.p.Load(); e != nil && e.version == t.Version {
		return e.v
	}
	e := &versioned[T]{version: t.Version, v: build(t)}
	m.p.Store(e)
	return e.v
}

// load returns the value built last, or the zero value.
func (m *perTopology[T]) load() T {
	if e := m.p.Load(); e != nil {
		return e.v
	}
	var zero T
	return zero
}
