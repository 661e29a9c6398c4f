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

	// OpenAPI v3 (openapiworker.go). The worker writes openapi, openapiDocs and openapiFailing; the
	// sync writes openapiWants and drops documents no Build needs any more.
	openapi        *OpenAPIIndex           // nil until fetched once; the last good index
	openapiDocs    map[string]*OpenAPISpec // key -> document under the hash openapi names; replaced, never modified
	openapiDocsID  string                  // the keys and hashes of openapiDocs
	openapiWants   []string                // keys whose documents the last Build wanted from this upstream
	openapiFailing bool
	openapiDocErrs map[string]string // key -> the type and hash of the last failure logged (wanted keys only)
}

// stateView is the part of an upstreamState a Topology shows: a change to it asks for a sync, a
// change elsewhere (another successful probe) does not.
type stateView struct {
	ready, initialized, fetchFailing bool
	version                          string
	api, apis                        *Document
	lastFetchOK                      time.Time // only while fetches fail: it sets when capabilities expire
	openapi                          *OpenAPIIndex
	openapiDocs                      string
}

func (s *upstreamState) visible() stateView {
	v := stateView{ready: s.ready, initialized: s.initialized, fetchFailing: s.fetchFailing, version: s.version, api: s.api, apis: s.apis,
		openapi: s.openapi, openapiDocs: s.openapiDocsID}
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
}

func (w *worker) refetch() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) runWorker(ctx context.Context, w *worker) {
	defer close(w.done)
	log := c.log.With(zap.String("upstream", w.name), zap.String("address", w.addr))
	c.fetch(ctx, w, log)
	c.probe(ctx, w, log)
	c.update(w.name, func(s *upstreamState) { s.initialized = true })

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
			c.fetch(ctx, w, log)
		case <-w.kick:
			c.fetch(ctx, w, log)
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

func (c *Controller) fetch(ctx context.Context, w *worker, log *zap.Logger) {
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
		return
	}
	if err != nil {
		c.metrics.fetchErrors.WithLabelValues(errorType(err)).Inc()
		c.update(w.name, func(s *upstreamState) {
			if !s.fetchFailing {
				log.Warn("discovery fetch failed; keeping the last known capabilities", zap.Error(err))
			}
			s.fetchFailing = true
		})
		return
	}
	now := c.cfg.Clock.Now()
	c.update(w.name, func(s *upstreamState) {
		if s.fetchFailing {
			log.Info("discovery fetch recovered")
		}
		s.fetchFailing = false
		s.version, s.api, s.apis, s.apiTag, s.apisTag, s.lastFetchOK = version, api, apis, newAPITag, newAPIsTag, now
	})
	// After discovery, and never failing it: the index, then the documents the last Build wants.
	c.fetchOpenAPI(ctx, w, log)
}
