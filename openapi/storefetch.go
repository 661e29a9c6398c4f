package openapi

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// Fetch refreshes upstream name's index (a failure keeps the last good one), then fetches the
// documents the last Apply wants from it that it lacks. A document that moved (its hash is stale)
// means the index changed since it was read: the index is fetched again, once. get reaches the
// upstream, log is its logger. Run it from a goroutine of the upstream's own, never between two
// readiness probes: it takes up to a RequestTimeout per document.
func (s *Store) Fetch(ctx context.Context, name string, get Getter, log *zap.Logger) {
	s.fetchIndex(ctx, name, get, log)
	if s.fetchDocs(ctx, name, get, log) {
		s.fetchIndex(ctx, name, get, log)
		s.fetchDocs(ctx, name, get, log)
	}
}

func (s *Store) fetchIndex(ctx context.Context, name string, get Getter, log *zap.Logger) {
	prev := s.Index(name)
	ictx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	idx, err := FetchIndex(ictx, get, prev)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		typ := s.cfg.ErrorType(err)
		s.cfg.Metrics.FetchFailed(typ)
		s.cfg.Metrics.Fetched(WhatIndex, typ)
		s.mu.Lock()
		if h := s.ups[name]; h != nil {
			if !h.failing {
				log.Warn("OpenAPI v3 index fetch failed; keeping the last good index", zap.Error(err))
			}
			h.failing = true
		}
		s.mu.Unlock()
		return
	}
	result := ResultOK
	switch {
	case idx == prev:
		result = ResultUnchanged
	case idx.Hash == "":
		result = ResultNotFound
	}
	s.cfg.Metrics.Fetched(WhatIndex, result)
	changed := false
	s.mu.Lock()
	if h := s.ups[name]; h != nil {
		if h.failing {
			log.Info("OpenAPI v3 index fetch recovered")
		}
		h.failing = false
		if h.index != idx {
			h.index, changed = idx, true
			s.keepDocsLocked(h, func(key string, d *Spec) bool { return idx.Keys[key] == d.Hash })
			s.cfg.Metrics.HeldBytes(s.heldBytesLocked())
		}
	}
	s.mu.Unlock()
	if changed {
		s.cfg.Changed()
	}
}

// fetchDocs gets the wanted documents the upstream lacks; it reports whether one moved (the index
// is stale).
func (s *Store) fetchDocs(ctx context.Context, name string, get Getter, log *zap.Logger) (moved bool) {
	var todo []want
	s.mu.Lock()
	if h := s.ups[name]; h != nil {
		todo = h.missing()
	}
	s.mu.Unlock()
	for _, d := range todo {
		err := s.document(ctx, name, get, d.key, d.hash)
		if ctx.Err() != nil {
			return false
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrOverBudget):
			s.cfg.Metrics.BudgetExceeded()
			s.cfg.Metrics.Fetched(WhatDocument, ResultOverBudget)
			s.mu.Lock()
			first := !s.overBudget
			s.overBudget = true
			s.mu.Unlock()
			if first {
				log.Warn("OpenAPI v3 document not held: the documents would exceed the memory budget; its key is routed, not merged",
					zap.String("key", d.key), zap.Int64("maxOpenAPIBytes", s.cfg.MaxBytes))
			}
		default:
			typ := s.cfg.ErrorType(err)
			s.cfg.Metrics.FetchFailed(typ)
			s.cfg.Metrics.Fetched(WhatDocument, typ)
			moved = moved || typ == ErrMoved
			// Logged once per key, hash and type: a wanted document is retried at every poll.
			what := typ + " " + d.hash
			s.mu.Lock()
			if h := s.ups[name]; h != nil && h.docErrs[d.key] != what {
				log.Warn("OpenAPI v3 document fetch failed", zap.String("key", d.key), zap.Error(err))
				if h.docErrs == nil {
					h.docErrs = map[string]string{}
				}
				h.docErrs[d.key] = what
			}
			s.mu.Unlock()
		}
	}
	return moved
}

// maxJoins bounds how often a document request joins another upstream's fetch that then failed
// before it fetches (and reports) on its own.
const maxJoins = 3

// document makes the document of key under hash held by upstream name: shared if any upstream
// holds it, else fetched once however many upstreams ask at the same time (singleflight). A fetch
// that another upstream led and that failed is tried again (its error may be that upstream's own:
// its context ended, its apiserver answered 503).
func (s *Store) document(ctx context.Context, name string, get Getter, key, hash string) error {
	for joins := 0; ; joins++ {
		s.mu.Lock()
		if d := s.heldLocked(key, hash); d != nil {
			changed := s.holdLocked(name, key, d)
			s.mu.Unlock()
			s.cfg.Metrics.Fetched(WhatDocument, ResultShared)
			if changed {
				s.cfg.Changed()
			}
			return nil
		}
		left := s.cfg.MaxBytes - s.heldBytesLocked()
		s.mu.Unlock()
		if left <= 0 {
			return ErrOverBudget
		}
		led := false
		ch := s.flight.DoChan(key+"\x00"+hash, func() (any, error) {
			led = true
			dctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			defer cancel()
			return FetchDocument(dctx, get, key, hash, left, s.cfg.MaxDocumentBytes, s.cfg.Clock.Now())
		})
		var r singleflight.Result
		select {
		case r = <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.Err != nil {
			if !led && joins < maxJoins {
				continue
			}
			return r.Err
		}
		if err := s.keep(name, key, r.Val.(*Spec)); err != nil {
			return err
		}
		if led {
			s.cfg.Metrics.Fetched(WhatDocument, ResultOK)
		} else {
			s.cfg.Metrics.Fetched(WhatDocument, ResultShared) // fetched by another upstream's worker
		}
		return nil
	}
}

// keep holds a fetched document for upstream name within the budget.
func (s *Store) keep(name, key string, d *Spec) error {
	s.mu.Lock()
	held := s.heldLocked(key, d.Hash)
	if held == nil && s.heldBytesLocked()+int64(len(d.JSON)) > s.cfg.MaxBytes {
		// Other documents may have been taken while this one was fetched.
		s.mu.Unlock()
		return ErrOverBudget
	}
	if held != nil {
		d = held // one copy of the bytes
	}
	changed := s.holdLocked(name, key, d)
	s.overBudget = false
	s.cfg.Metrics.HeldBytes(s.heldBytesLocked())
	s.mu.Unlock()
	if changed {
		s.cfg.Changed()
	}
	return nil
}
