package discovery

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// reconcileWorkers starts a worker for every new candidate, restarts one whose address changed,
// stops the ones no longer wanted, and asks for a refetch when a Lease holder changed (a restarted
// apiserver, maybe of another version). It runs on the goroutine of Run, which owns the workers;
// it creates and removes the entries of states, whose fields the workers write.
func (c *Controller) reconcileWorkers(ctx context.Context, cands []candidate) {
	want := map[string]candidate{}
	for _, cand := range cands {
		want[cand.Name] = cand
	}
	for name, w := range c.workers {
		if cand, ok := want[name]; !ok || cand.Address != w.addr {
			w.cancel()
			<-w.done
			delete(c.workers, name)
			c.mu.Lock()
			if s := c.states[name]; !ok && s != nil && (s.api != nil || s.apis != nil) {
				c.departed[name] = departure{api: s.api, apis: s.apis, until: c.cfg.Clock.Now().Add(c.cfg.DepartedTTL)}
				c.log.Info("upstream departed", zap.String("upstream", name), zap.Duration("unavailableFor", c.cfg.DepartedTTL))
			}
			delete(c.states, name)
			c.mu.Unlock()
			c.openapi.Remove(name)
		}
	}
	for name := range want {
		delete(c.departed, name)
	}
	for _, cand := range cands {
		if w, ok := c.workers[cand.Name]; ok {
			if w.holder != cand.Holder {
				w.holder = cand.Holder
				w.refetch()
			}
			continue
		}
		c.mu.Lock()
		_, known := c.states[cand.Name]
		if !known {
			c.states[cand.Name] = &upstreamState{}
		}
		c.mu.Unlock()
		c.openapi.Add(cand.Name)
		// New checked that the config builds a client; only the address differs here.
		f, err := newFetcher(c.cfg.Upstream, cand.Address, c.cfg.MaxDocumentBytes)
		if err != nil {
			if !known {
				c.log.Error("cannot build a client for upstream", zap.String("upstream", cand.Name), zap.Error(err))
			}
			c.mu.Lock()
			c.states[cand.Name].initialized = true // no sync request: this sync already counts it
			c.mu.Unlock()
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{name: cand.Name, addr: cand.Address, holder: cand.Holder, f: f, kick: make(chan struct{}, 1),
			openapiKick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
		c.workers[cand.Name] = w
		go c.runWorker(wctx, w)
	}
}

type departure struct {
	api, apis *Document
	until     time.Time
}
