package discovery

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// upstreamState is what the worker of one upstream learned about it. Its worker writes it (through
// Controller.update) and the sync reads it, both under the Controller's mutex.
type upstreamState struct {
	ready       bool
	probed      bool // a probe has completed
	failures    int  // consecutive failed probes
	initialized bool // the first fetch and probe have completed (successfully or not)

	version         string
	api, apis       *Document
	apiTag, apisTag string
	lastFetchOK     time.Time
	fetchFailing    bool
	// Its OpenAPI v3 is the Controller's openapi.Store's (openapiworker.go).
}

// stateView is the part of an upstreamState a Topology shows: a change to it asks for a sync, a
// change elsewhere (another successful probe) does not.
type stateView struct {
	ready, initialized, fetchFailing bool
	version                          string
	api, apis                        *Document
	lastFetchOK                      time.Time // only while fetches fail: it sets when capabilities expire
}

func (s *upstreamState) visible() stateView {
	v := stateView{ready: s.ready, initialized: s.initialized, fetchFailing: s.fetchFailing, version: s.version, api: s.api, apis: s.apis}
	if s.fetchFailing {
		v.lastFetchOK = s.lastFetchOK
	}
	return v
}

// worker probes and fetches one upstream until its context is cancelled.
type worker struct {
	name   string
	addr   string
	holder string
	f      *fetcher
	kick   chan struct{} // refetch discovery now (coalesced)
	cancel context.CancelFunc
	done   chan struct{}
	// openapiKick: fetch the OpenAPI v3 index and wanted documents now (coalesced), on the worker's
	// second goroutine (runOpenAPI).
	openapiKick chan struct{}
}

func (w *worker) refetch() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *worker) fetchOpenAPI() {
	select {
	case w.openapiKick <- struct{}{}:
	default:
	}
}

func (c *Controller) runWorker(ctx context.Context, w *worker) {
	defer close(w.done)
	log := c.log.With(zap.String("upstream", w.name), zap.String("address", w.addr))
	// The first round in order, before any probe runs: discovery, the OpenAPI v3 index and the
	// documents the last Build wants, the readiness probe; the first Topology has all of them.
	if c.fetch(ctx, w, log) {
		c.openapi.Fetch(ctx, w.name, w.f.getOpenAPI, log)
	}
	c.probe(ctx, w, log)
	c.update(w.name, func(s *upstreamState) { s.initialized = true })
	// Later OpenAPI fetches on a goroutine of their own: a slow document never delays a probe.
	openapiDone := make(chan struct{})
	go func() {
		defer close(openapiDone)
		c.runOpenAPI(ctx, w, log)
	}()
	defer func() { <-openapiDone }()

	probeT := c.cfg.Clock.NewTicker(c.cfg.ProbeInterval)
	defer probeT.Stop()
	pollT := c.cfg.Clock.NewTicker(c.cfg.PollInterval)
	defer pollT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-probeT.C():
			c.probe(ctx, w, log)
		case <-pollT.C():
			if c.fetch(ctx, w, log) {
				w.fetchOpenAPI()
			}
		case <-w.kick:
			if c.fetch(ctx, w, log) {
				w.fetchOpenAPI()
			}
		}
	}
}

func (c *Controller) probe(ctx context.Context, w *worker, log *zap.Logger) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	err := w.f.ready(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	becameReady := false
	c.update(w.name, func(s *upstreamState) {
		s.probed = true
		if err == nil {
			becameReady = !s.ready
			s.ready, s.failures = true, 0
			return
		}
		s.failures++
		if s.ready && s.failures >= c.cfg.FailureThreshold {
			s.ready = false
			log.Warn("upstream not ready", zap.Int("failedProbes", s.failures), zap.Error(err))
		}
	})
	if err != nil {
		c.metrics.fetchErrors.WithLabelValues(errorType(err)).Inc()
	}
	if becameReady {
		// It may have restarted as another version (static upstreams have no Lease to tell us).
		w.refetch()
	}
}

// fetch refetches the upstream's discovery; ok: it succeeded (the OpenAPI v3 fetch follows).
func (c *Controller) fetch(ctx context.Context, w *worker, log *zap.Logger) (ok bool) {
	var prevAPI, prevAPIs *Document
	var apiTag, apisTag string
	c.read(w.name, func(s *upstreamState) { prevAPI, prevAPIs, apiTag, apisTag = s.api, s.apis, s.apiTag, s.apisTag })

	fctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	version, err := w.f.version(fctx)
	var api, apis *Document
	var newAPITag, newAPIsTag string
	if err == nil {
		api, newAPITag, err = w.f.document(fctx, "/api", prevAPI, apiTag)
	}
	if err == nil {
		apis, newAPIsTag, err = w.f.document(fctx, "/apis", prevAPIs, apisTag)
	}
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		c.metrics.fetchErrors.WithLabelValues(errorType(err)).Inc()
		c.update(w.name, func(s *upstreamState) {
			if !s.fetchFailing {
				log.Warn("discovery fetch failed; keeping the last known capabilities", zap.Error(err))
			}
			s.fetchFailing = true
		})
		return false
	}
	now := c.cfg.Clock.Now()
	c.update(w.name, func(s *upstreamState) {
		if s.fetchFailing {
			log.Info("discovery fetch recovered")
		}
		s.fetchFailing = false
		s.version, s.api, s.apis, s.apiTag, s.apisTag, s.lastFetchOK = version, api, apis, newAPITag, newAPIsTag, now
	})
	return true
}
