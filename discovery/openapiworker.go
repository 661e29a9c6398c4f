package discovery

import (
	"context"
	"errors"
	"maps"
	"slices"

	"go.uber.org/zap"
)

// OpenAPI v3 in the workers. Each worker fetches its upstream's index after discovery (an index
// failure never fails discovery: the last good index stays), then the documents the last Build
// wants from it (Topology.OpenAPIWants). Documents are content-addressed: a document is held once
// however many upstreams publish it under one hash (every upstream of one version does), fetched by
// the first worker that needs it while the others wait for it. Documents no Build needs are dropped,
// and the bytes held stay within Config.MaxOpenAPIBytes.

// fetchOpenAPI refreshes the index, then fetches the wanted documents. A document that moved (its
// hash is stale) means the index changed since it was read: the index is fetched again, once.
func (c *Controller) fetchOpenAPI(ctx context.Context, w *worker, log *zap.Logger) {
	c.fetchOpenAPIIndex(ctx, w, log)
	if c.fetchOpenAPIDocs(ctx, w, log) {
		c.fetchOpenAPIIndex(ctx, w, log)
		c.fetchOpenAPIDocs(ctx, w, log)
	}
}

func (c *Controller) fetchOpenAPIIndex(ctx context.Context, w *worker, log *zap.Logger) {
	var prev *OpenAPIIndex
	c.read(w.name, func(s *upstreamState) { prev = s.openapi })
	ictx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	idx, err := w.f.openAPIIndex(ictx, prev)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		typ := errorType(err)
		c.metrics.fetchErrors.WithLabelValues(typ).Inc()
		c.metrics.openapiFetches.WithLabelValues(openapiIndex, typ).Inc()
		c.update(w.name, func(s *upstreamState) {
			if !s.openapiFailing {
				log.Warn("OpenAPI v3 index fetch failed; keeping the last good index", zap.Error(err))
			}
			s.openapiFailing = true
		})
		return
	}
	result := resultOK
	switch {
	case idx == prev:
		result = resultUnchanged
	case idx.Hash == "":
		result = resultNotFound
	}
	c.metrics.openapiFetches.WithLabelValues(openapiIndex, result).Inc()
	c.update(w.name, func(s *upstreamState) {
		if s.openapiFailing {
			log.Info("OpenAPI v3 index fetch recovered")
		}
		s.openapiFailing = false
		if s.openapi == idx {
			return
		}
		s.openapi = idx
		c.setOpenAPIDocsLocked(s, func(key string, d *OpenAPISpec) bool { return idx.Keys[key] == d.Hash })
	})
}

type openAPIWant struct{ key, hash string }

// missingOpenAPIDocs lists the wanted keys the index names and no held document has the hash of.
func (s *upstreamState) missingOpenAPIDocs() []openAPIWant {
	if s.openapi == nil {
		return nil
	}
	var out []openAPIWant
	for _, k := range s.openapiWants {
		h, ok := s.openapi.Keys[k]
		if d := s.openapiDocs[k]; ok && (d == nil || d.Hash != h) {
			out = append(out, openAPIWant{k, h})
		}
	}
	return out
}

// fetchOpenAPIDocs gets the wanted documents the upstream's state lacks; it reports whether one
// moved (the index is stale).
func (c *Controller) fetchOpenAPIDocs(ctx context.Context, w *worker, log *zap.Logger) (moved bool) {
	var todo []openAPIWant
	c.read(w.name, func(s *upstreamState) { todo = s.missingOpenAPIDocs() })
	for _, d := range todo {
		err := c.openAPIDocument(ctx, w, d.key, d.hash)
		if ctx.Err() != nil {
			return false
		}
		switch {
		case err == nil:
		case errors.Is(err, errOverBudget):
			c.metrics.openapiBudgetExceeded.Inc()
			c.metrics.openapiFetches.WithLabelValues(openapiDocument, resultOverBudget).Inc()
			c.mu.Lock()
			first := !c.openAPIOverBudget
			c.openAPIOverBudget = true
			c.mu.Unlock()
			if first {
				log.Warn("OpenAPI v3 document not held: the documents would exceed the memory budget; its key is routed, not merged",
					zap.String("key", d.key), zap.Int64("maxOpenAPIBytes", c.cfg.MaxOpenAPIBytes))
			}
		default:
			typ := errorType(err)
			c.metrics.fetchErrors.WithLabelValues(typ).Inc()
			c.metrics.openapiFetches.WithLabelValues(openapiDocument, typ).Inc()
			if typ == ErrMoved {
				moved = true
			}
			// Logged once per key, hash and type: a wanted document is retried at every poll.
			what := typ + " " + d.hash
			c.update(w.name, func(s *upstreamState) {
				if s.openapiDocErrs[d.key] != what {
					log.Warn("OpenAPI v3 document fetch failed", zap.String("key", d.key), zap.Error(err))
					if s.openapiDocErrs == nil {
						s.openapiDocErrs = map[string]string{}
					}
					s.openapiDocErrs[d.key] = what
				}
			})
		}
	}
	return moved
}

// openAPIDocument makes the document of key under hash held by w's upstream: shared if any upstream
// holds it, else fetched (once: a concurrent fetch of the same hash is waited for).
func (c *Controller) openAPIDocument(ctx context.Context, w *worker, key, hash string) error {
	for {
		c.mu.Lock()
		if d := c.heldOpenAPIDocLocked(key, hash); d != nil {
			changed := c.holdOpenAPIDocLocked(w.name, key, d)
			c.mu.Unlock()
			c.metrics.openapiFetches.WithLabelValues(openapiDocument, resultShared).Inc()
			if changed {
				c.requestSync()
			}
			return nil
		}
		if ch, ok := c.openAPIInflight[key+"\x00"+hash]; ok {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		left := c.cfg.MaxOpenAPIBytes - c.heldOpenAPIBytesLocked()
		if left <= 0 {
			c.mu.Unlock()
			return errOverBudget
		}
		ch := make(chan struct{})
		c.openAPIInflight[key+"\x00"+hash] = ch
		c.mu.Unlock()

		dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		d, err := w.f.openAPIDoc(dctx, key, hash, left)
		cancel()
		if d != nil {
			d.Built = c.cfg.Clock.Now()
		}
		changed := false
		c.mu.Lock()
		delete(c.openAPIInflight, key+"\x00"+hash)
		close(ch)
		if err == nil {
			// Other documents may have been taken while this one was fetched.
			if c.heldOpenAPIBytesLocked()+int64(len(d.JSON)) > c.cfg.MaxOpenAPIBytes {
				err = errOverBudget
			} else {
				changed = c.holdOpenAPIDocLocked(w.name, key, d)
				c.openAPIOverBudget = false
			}
		}
		c.mu.Unlock()
		if err == nil {
			c.metrics.openapiFetches.WithLabelValues(openapiDocument, resultOK).Inc()
		}
		if changed {
			c.requestSync()
		}
		return err
	}
}

// applyOpenAPIWants takes the documents a new Topology wants: each upstream's wants are stored in its
// state, documents no longer needed are dropped, and the workers that lack a wanted document are asked
// to fetch. It runs on the goroutine of Run after each Build.
//
// A document stays while its key needs a merge: wanted from any upstream (a merge needs every
// upstream's), merged (ActionServe), or degraded (its merge waits for documents or failed and the
// key falls back to a route). The last two keep what a merge used once it no longer wants anything:
// dropping the documents then would make the next Build want them again, a fetch loop. A key that no
// longer needs a merge (its skew resolved into a route or the default) drops them. A document whose
// hash leaves its upstream's index (an upgrade) is dropped with the old index; the budget bounds the
// rest.
func (c *Controller) applyOpenAPIWants(t *Topology) {
	wants := c.openAPIWants(t)
	keep := map[string]bool{}
	for _, keys := range wants {
		for _, k := range keys {
			keep[k] = true
		}
	}
	for _, d := range t.OpenAPIDecisions() {
		if d.Action == ActionServe {
			keep[d.Key] = true
		}
	}
	for k := range t.OpenAPIDegraded() {
		keep[k] = true
	}
	var kick []string
	dropped := false
	c.mu.Lock()
	for name, s := range c.states {
		s.openapiWants = wants[name]
		before := s.openapiDocsID
		c.setOpenAPIDocsLocked(s, func(key string, _ *OpenAPISpec) bool { return keep[key] })
		dropped = dropped || s.openapiDocsID != before
		if len(s.missingOpenAPIDocs()) > 0 {
			kick = append(kick, name)
		}
		maps.DeleteFunc(s.openapiDocErrs, func(key, _ string) bool { return !slices.Contains(s.openapiWants, key) })
	}
	// Also after an upstream left with its documents.
	c.metrics.openapiHeldBytes.Set(float64(c.heldOpenAPIBytesLocked()))
	c.mu.Unlock()
	if dropped {
		c.requestSync()
	}
	for _, name := range kick {
		c.refetch(name)
	}
}

// openAPIIndexOf returns the last good index of upstream name (tests).
func (c *Controller) openAPIIndexOf(name string) *OpenAPIIndex {
	var idx *OpenAPIIndex
	c.read(name, func(s *upstreamState) { idx = s.openapi })
	return idx
}
