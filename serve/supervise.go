package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// group runs the components of a Server (discovery, xDS, the gRPC servers, HTTP). A component that
// fails, or stops while the server is not shutting down, takes the others down: a process without
// discovery or without its ext_proc listener must exit so that its supervisor (kubelet) restarts it,
// not linger half alive. Until the others have stopped, /healthz answers 503 and names it.
type group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	dead     []string // components that ended on their own, in order
	firstErr error    // the error of dead[0]
	errs     []error  // every component error, in order
}

func newGroup(parent context.Context) *group {
	ctx, cancel := context.WithCancelCause(parent)
	return &group{ctx: ctx, cancel: cancel}
}

// errStopped is the error of a component that returned without one before shutdown.
var errStopped = errors.New("stopped on its own")

// run starts f with the group's context.
func (g *group) run(name string, f func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := f(g.ctx)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		shuttingDown := g.ctx.Err() != nil
		if shuttingDown && errors.Is(err, context.Canceled) {
			err = nil // interrupted by the shutdown itself
		}
		if err == nil && !shuttingDown {
			err = errStopped
		}
		if err == nil {
			return
		}
		err = fmt.Errorf("%s: %w", name, err)
		g.mu.Lock()
		if !shuttingDown {
			if len(g.dead) == 0 {
				g.firstErr = err
			}
			g.dead = append(g.dead, name)
		}
		g.errs = append(g.errs, err)
		g.mu.Unlock()
		g.cancel(err)
	}()
}

// wait returns once every component has stopped, with their errors, the first failure first.
func (g *group) wait() error {
	g.wg.Wait()
	g.cancel(nil)
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// deadComponents names the components that ended on their own, with the first failure.
func (g *group) deadComponents() ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.dead) == 0 {
		return nil, nil
	}
	return append([]string(nil), g.dead...), g.firstErr
}
