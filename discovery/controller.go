package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/openapi"
)

// Work queue keys. Informer handlers and workers only enqueue; the one goroutine of Run does the work.
const (
	keySync       = "sync"     // reread the inputs; rebuild the Topology if one changed
	keyRefetchAll = "refetch"  // every worker refetches discovery (a CRD or APIService changed)
	keyRefetch    = "refetch/" // + name: that worker refetches discovery
	// keyRefetchLate: every worker refetches again once openAPILag has passed since the last CRD or
	// APIService event (see refetchAfterAPIChange).
	keyRefetchLate = "refetch-late"
)

// Controller is the single writer of the Topology.
//
// Each piece of state has one owner. The workers own what they learn about their upstream (states,
// written through update under mu); informer handlers own leaseEvent (under mu); the goroutine of
// Run owns the rest (workers, departed, the logged rejections, the last inputs and Topology). They
// talk through a client-go work queue: handlers and workers enqueue a sync or a refetch, and only
// when something they own changed.
type Controller struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	bootID  string
	started time.Time

	current atomic.Pointer[Topology]
	queue   workqueue.TypedRateLimitingInterface[string]
	// late is the refetch openAPILag after the last CRD or APIService event (openapiworker.go).
	lateMu sync.Mutex
	late   clock.Timer
	// openapi holds every upstream's OpenAPI v3 index and documents; memo the merged documents of
	// recent Builds (each Controller its own: Build depends on no other history).
	openapi *openapi.Store
	memo    *openapi.Memo

	// Listers, set by startInformers before the queue runs.
	leases      func() []*coordinationv1.Lease
	slices      func() []*discoveryv1.EndpointSlice
	apiServices func() []*metav1.PartialObjectMetadata
	// apiServicesSynced: the APIService lister is complete (always, without Config.Metadata).
	apiServicesSynced func() bool

	mu         sync.Mutex
	states     map[string]*upstreamState
	notify     chan struct{} // closed and replaced on every publish
	leaseEvent time.Time     // first Lease change not yet reflected in a published Topology

	// Owned by the goroutine of Run.
	workers  map[string]*worker
	departed map[string]departure
	// seenRej remembers, per Lease name, a digest of the annotation last reported as refused, so a
	// rejection is logged and counted once per Lease and address. Pruned to the Leases that exist.
	seenRej map[string][sha256.Size]byte
	// ignoredLogged remembers the Leases last logged as ignored, by name -> reason; replaced every sync.
	ignoredLogged map[string]string
	inputs        [sha256.Size]byte // digest of the inputs of the last Build
	fingerprint   [sha256.Size]byte // of the published Topology
	generation    int64
}

// New checks cfg and returns a Controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	cfg.defaults()
	if cfg.Upstream == nil {
		return nil, errors.New("discovery: Config.Upstream (credentials for the upstreams) is required")
	}
	if cfg.Client == nil && len(cfg.Static) == 0 {
		return nil, errors.New("discovery: neither a Kubernetes client (identity Leases) nor static upstreams")
	}
	if len(cfg.Static) > cfg.MaxUpstreams {
		return nil, fmt.Errorf("discovery: %d static upstreams but at most %d upstreams (MaxUpstreams)", len(cfg.Static), cfg.MaxUpstreams)
	}
	if _, err := newFetcher(cfg.Upstream, "127.0.0.1:443", cfg.MaxDocumentBytes); err != nil {
		return nil, fmt.Errorf("discovery: upstream client: %w", err)
	}
	now := cfg.Clock.Now()
	m := newMetrics(cfg.Registry)
	c := &Controller{
		cfg:     cfg,
		log:     cfg.Logger.Named("discovery"),
		metrics: m,
		bootID:  strconv.FormatInt(now.UnixNano(), 36),
		started: now,
		// The default controller limiter: per-key exponential backoff (reset by Forget after every
		// item, so 5 ms) and 10 syncs a second overall with bursts of 100, which coalesces churn.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: cfg.Clock}),
		leases:            func() []*coordinationv1.Lease { return nil },
		slices:            func() []*discoveryv1.EndpointSlice { return nil },
		apiServices:       func() []*metav1.PartialObjectMetadata { return nil },
		apiServicesSynced: func() bool { return true },
		states:            map[string]*upstreamState{},
		memo:              openapi.NewMemo(openapi.MemoEntries, openapi.MemoBytes),
		notify:            make(chan struct{}),
		workers:           map[string]*worker{},
		departed:          map[string]departure{},
		seenRej:           map[string][sha256.Size]byte{},
		ignoredLogged:     map[string]string{},
	}
	c.openapi = newOpenAPIStore(cfg, m, c.requestSync)
	return c, nil
}

// Current returns the latest published Topology, nil before the first.
func (c *Controller) Current() *Topology { return c.current.Load() }

// Watch returns the current Topology and a channel closed when a newer one is published.
func (c *Controller) Watch() (*Topology, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current.Load(), c.notify
}

// requestSync asks for a sync, rate limited: bursts of changes coalesce into one.
func (c *Controller) requestSync() { c.queue.AddRateLimited(keySync) }

// refetch asks the worker of one upstream to refetch its discovery now.
func (c *Controller) refetch(name string) { c.queue.Add(keyRefetch + name) }

// refetchAll asks every worker to refetch its discovery now.
func (c *Controller) refetchAll() { c.queue.Add(keyRefetchAll) }

// update applies fn to the state of upstream name (from its worker) and asks for a sync if fn
// changed anything a Topology shows.
func (c *Controller) update(name string, fn func(*upstreamState)) {
	c.mu.Lock()
	s := c.states[name]
	changed := false
	if s != nil {
		before := s.visible()
		fn(s)
		changed = s.visible() != before
	}
	c.mu.Unlock()
	if changed {
		c.requestSync()
	}
}

func (c *Controller) read(name string, fn func(*upstreamState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.states[name]; s != nil {
		fn(s)
	}
}

// Run starts the informers and workers and keeps the Topology current until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	defer func() {
		for name, w := range c.workers {
			w.cancel()
			<-w.done
			delete(c.workers, name)
		}
	}()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	c.queue.Add(keySync)
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return nil
		}
		if ctx.Err() == nil {
			c.process(ctx, key)
		}
		c.queue.Forget(key) // nothing fails here: no per-key backoff to keep
		c.queue.Done(key)
	}
}

func (c *Controller) process(ctx context.Context, key string) {
	switch {
	case key == keySync:
		if next := c.sync(ctx); !next.IsZero() {
			// The delaying queue keeps the earliest of several pending AddAfter of one key.
			c.queue.AddAfter(keySync, max(next.Sub(c.cfg.Clock.Now()), time.Millisecond))
		}
	case key == keyRefetchAll:
		for _, w := range c.workers {
			w.refetch()
		}
	case key == keyRefetchLate:
		for _, w := range c.workers {
			w.refetch()
		}
	case strings.HasPrefix(key, keyRefetch):
		if w := c.workers[strings.TrimPrefix(key, keyRefetch)]; w != nil {
			w.refetch()
		}
	}
}
