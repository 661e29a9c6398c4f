package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Config configures a Controller. Zero durations take the defaults in brackets.
type Config struct {
	// Client reads identity Leases and the default/kubernetes EndpointSlice. Nil: static upstreams only.
	Client kubernetes.Interface
	// Metadata watches CustomResourceDefinitions and APIServices, to refetch discovery at once when
	// they change. Nil: only the periodic poll notices them.
	Metadata metadata.Interface
	// Upstream holds the credentials and CA used to talk to every upstream; its Host is replaced by
	// each upstream's address and the certificate verified for kubernetes.default.svc.
	Upstream *rest.Config
	Static   []StaticUpstream
	Policy   AddressPolicy
	// TrustEndpointSlice accepts Lease addresses listed in the default/kubernetes EndpointSlice.
	TrustEndpointSlice bool

	StaleAfter       time.Duration // a Lease not renewed for this long is gone [30s: 3 renew periods]
	ProbeInterval    time.Duration // /readyz probes [2s]
	FailureThreshold int           // failed probes in a row before "not ready" [3]
	PollInterval     time.Duration // discovery refetch [30s]
	CapabilityTTL    time.Duration // how long to keep the last capabilities of an upstream whose fetches fail [10m]
	DepartedTTL      time.Duration // how long resources only a departed upstream served answer 503, not 404 [10m]
	RequestTimeout   time.Duration // per request to an upstream [5s]
	InitialTimeout   time.Duration // longest wait for first fetches before the first Topology [15s]
	MaxDocumentBytes int64         // largest accepted discovery document [8 MiB]
	// MaxUpstreams caps the upstreams (static ones included); Leases past it are refused [64].
	MaxUpstreams int

	Logger   *zap.Logger
	Registry prometheus.Registerer
	Now      func() time.Time
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StaleAfter, 30*time.Second)
	def(&c.ProbeInterval, 2*time.Second)
	def(&c.PollInterval, 30*time.Second)
	def(&c.CapabilityTTL, 10*time.Minute)
	def(&c.DepartedTTL, 10*time.Minute)
	def(&c.RequestTimeout, 5*time.Second)
	def(&c.InitialTimeout, 15*time.Second)
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = 3
	}
	if c.MaxUpstreams <= 0 {
		c.MaxUpstreams = DefaultMaxUpstreams
	}
	if c.MaxDocumentBytes <= 0 {
		c.MaxDocumentBytes = 8 << 20
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// DefaultMaxUpstreams is the default cap on upstreams. A control plane runs 3 to 5 apiservers, twice
// that during a surge upgrade; 64 leaves ample room while bounding what forged Leases can cost: one
// worker probing every ProbeInterval per upstream, and in every Envoy two clusters (HTTP/2 and
// HTTP/1.1) per upstream, each health-checked every second.
const DefaultMaxUpstreams = 64

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// Controller is the single writer of the Topology.
type Controller struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	bootID  string

	current atomic.Pointer[Topology]

	mu          sync.Mutex
	notify      chan struct{} // closed and replaced on every publish
	states      map[string]*upstreamState
	leaseEvent  time.Time // first Lease event not yet reflected in a published Topology
	fingerprint [32]byte
	generation  int64

	poke     chan struct{}
	workers  map[string]*worker   // owned by the Run goroutine
	departed map[string]departure // owned by the Run goroutine
	leases   func() []*coordinationv1.Lease
	slices   func() []*discoveryv1.EndpointSlice
	// seenRej remembers, per Lease name, a digest of the annotation last reported as refused, so a
	// rejection is logged and counted once per Lease and address. Pruned to the Leases that exist.
	seenRej map[string][sha256.Size]byte
	// ignoredLogged remembers the Leases last logged as ignored, by name -> reason; pruned every rebuild.
	ignoredLogged map[string]string
	started       time.Time
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
	now := time.Now()
	return &Controller{
		cfg:           cfg,
		log:           cfg.Logger.Named("discovery"),
		metrics:       newMetrics(cfg.Registry),
		bootID:        strconv.FormatInt(now.UnixNano(), 36),
		notify:        make(chan struct{}),
		states:        map[string]*upstreamState{},
		poke:          make(chan struct{}, 1),
		workers:       map[string]*worker{},
		departed:      map[string]departure{},
		leases:        func() []*coordinationv1.Lease { return nil },
		slices:        func() []*discoveryv1.EndpointSlice { return nil },
		seenRej:       map[string][sha256.Size]byte{},
		ignoredLogged: map[string]string{},
		started:       now,
	}, nil
}

// Current returns the latest published Topology, nil before the first.
func (c *Controller) Current() *Topology { return c.current.Load() }

// Watch returns the current Topology and a channel closed when a newer one is published.
func (c *Controller) Watch() (*Topology, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current.Load(), c.notify
}

func (c *Controller) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func (c *Controller) update(name string, fn func(*upstreamState)) {
	c.mu.Lock()
	if s := c.states[name]; s != nil {
		fn(s)
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Controller) read(name string, fn func(*upstreamState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.states[name]; s != nil {
		fn(s)
	}
}

// Run starts the informers and workers and rebuilds the Topology until ctx ends.
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
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := c.rebuild(ctx)
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.poke:
		case <-timer.C:
		}
	}
}

func (c *Controller) startInformers(ctx context.Context) error {
	var synced []cache.InformerSynced
	if c.cfg.Client != nil {
		leaseFactory := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0,
			informers.WithNamespace(LeaseNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = IdentityLabelSelector }))
		li := leaseFactory.Coordination().V1().Leases()
		if _, err := li.Informer().AddEventHandler(c.handler(true)); err != nil {
			return err
		}
		lister := li.Lister()
		c.leases = func() []*coordinationv1.Lease {
			l, _ := lister.List(labels.Everything())
			return l
		}
		synced = append(synced, li.Informer().HasSynced)
		leaseFactory.Start(ctx.Done())

		if c.cfg.TrustEndpointSlice {
			esFactory := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0,
				informers.WithNamespace("default"),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) {
					o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes"
					o.FieldSelector = "metadata.name=kubernetes"
				}))
			ei := esFactory.Discovery().V1().EndpointSlices()
			if _, err := ei.Informer().AddEventHandler(c.handler(false)); err != nil {
				return err
			}
			esLister := ei.Lister()
			c.slices = func() []*discoveryv1.EndpointSlice {
				l, _ := esLister.List(labels.Everything())
				return l
			}
			synced = append(synced, ei.Informer().HasSynced)
			esFactory.Start(ctx.Done())
		}
	}
	if c.cfg.Metadata != nil {
		mf := metadatainformer.NewSharedInformerFactory(c.cfg.Metadata, 0)
		refetchAll := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.refetchAll() },
			UpdateFunc: func(any, any) { c.refetchAll() },
			DeleteFunc: func(any) { c.refetchAll() },
		}
		for _, gvr := range []schema.GroupVersionResource{crdGVR, apiServiceGVR} {
			inf := mf.ForResource(gvr).Informer()
			if _, err := inf.AddEventHandler(refetchAll); err != nil {
				return err
			}
			synced = append(synced, inf.HasSynced)
		}
		mf.Start(ctx.Done())
	}
	// Wait for the informers, but not forever: if the apiserver they talk to is not reachable yet (for
	// instance when the kubeconfig points at the front this very Topology configures), publish from
	// the static upstreams now and catch up as the informers sync (their events trigger rebuilds).
	syncCtx, cancel := context.WithTimeout(ctx, c.cfg.InitialTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		if ctx.Err() != nil {
			return fmt.Errorf("discovery: informers did not sync: %w", ctx.Err())
		}
		c.log.Warn("informers not synced yet; building from static upstreams meanwhile", zap.Duration("waited", c.cfg.InitialTimeout))
	}
	return nil
}

func (c *Controller) handler(lease bool) cache.ResourceEventHandler {
	on := func() {
		if lease {
			c.mu.Lock()
			if c.leaseEvent.IsZero() {
				c.leaseEvent = time.Now()
			}
			c.mu.Unlock()
		}
		c.wake()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { on() },
		UpdateFunc: func(any, any) { on() },
		DeleteFunc: func(any) { on() },
	}
}

// refetch asks for a refetch of one upstream's discovery at the next rebuild.
func (c *Controller) refetch(name string) {
	c.mu.Lock()
	if s := c.states[name]; s != nil {
		s.refetch = true
	}
	c.mu.Unlock()
	c.wake()
}

// refetchAll is called from informer goroutines; workers are read under the Run goroutine's
// ownership, so it goes through a poke with a flag.
func (c *Controller) refetchAll() {
	c.mu.Lock()
	for _, s := range c.states {
		s.refetch = true
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Controller) endpoints() []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range c.slices() {
		// Only the slice the apiservers maintain themselves; anyone who can create EndpointSlices in
		// default can label another one kubernetes.io/service-name=kubernetes.
		if s.Namespace != "default" || s.Name != "kubernetes" {
			continue
		}
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(*p.Port)))
					}
				}
			}
		}
	}
	return out
}

// rebuild reconciles workers with the Leases and static upstreams, builds a Topology and publishes
// it if its content changed. It returns when it wants to run again (zero: only on events).
func (c *Controller) rebuild(ctx context.Context) time.Time {
	start := time.Now()
	now := c.cfg.Now()
	c.mu.Lock()
	answering := map[string]bool{}
	for name, s := range c.states {
		if s.ready {
			answering[name] = true
		}
	}
	c.mu.Unlock()
	leases := c.leases()
	view := readLeases(leases, c.cfg.Static, c.cfg.Policy, c.endpoints(), now, c.cfg.StaleAfter, answering)
	known := make(map[string]bool, len(c.workers))
	for name := range c.workers {
		known[name] = true
	}
	view.limit(c.cfg.MaxUpstreams, known)
	c.noteRejections(view.rejected, leases)
	c.noteIgnored(view.ignored)
	c.reconcileWorkers(ctx, view.candidates)

	c.mu.Lock()
	facts := make([]UpstreamFacts, 0, len(view.candidates))
	initialized := true
	next := view.nextExpiry
	for _, cand := range view.candidates {
		s := c.states[cand.Name]
		if w := c.workers[cand.Name]; s.refetch && w != nil {
			s.refetch = false
			w.refetch()
		}
		initialized = initialized && s.initialized
		f := UpstreamFacts{Upstream: Upstream{
			Name: cand.Name, Address: cand.Address, Source: cand.Source, LeaseName: cand.LeaseName, Holder: cand.Holder,
			Version: s.version, Ready: s.ready, Stale: s.fetchFailing && s.apis != nil,
		}}
		if s.apis != nil || s.api != nil {
			if expiry := s.lastFetchOK.Add(c.cfg.CapabilityTTL); !s.fetchFailing || expiry.After(now) {
				f.API, f.APIs = s.api, s.apis
				if s.fetchFailing && (next.IsZero() || expiry.Before(next)) {
					next = expiry
				}
			} else {
				f.Stale = false // expired: no capabilities at all
			}
		}
		facts = append(facts, f)
	}
	leaseEvent := c.leaseEvent
	c.mu.Unlock()
	for name, d := range c.departed {
		if !d.until.After(now) {
			delete(c.departed, name)
			continue
		}
		facts = append(facts, UpstreamFacts{Upstream: Upstream{Name: name}, API: d.api, APIs: d.apis, Departed: true})
		next = minTime(next, d.until)
	}

	if !initialized && c.current.Load() == nil && time.Since(c.started) < c.cfg.InitialTimeout {
		// Wait for every upstream's first fetch (each one pokes), but not forever.
		return minTime(next, c.started.Add(c.cfg.InitialTimeout))
	}
	c.mu.Lock()
	gen := c.generation + 1
	c.mu.Unlock()
	t := Build(c.bootID+"-"+strconv.FormatInt(gen, 10), now, facts)
	t.Ignored = view.ignored
	fp := fingerprint(t)
	c.metrics.rebuildDuration.Observe(time.Since(start).Seconds())

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current.Load() != nil && fp == c.fingerprint {
		return next
	}
	c.generation, c.fingerprint = gen, fp
	c.current.Store(t)
	close(c.notify)
	c.notify = make(chan struct{})
	if !leaseEvent.IsZero() && c.leaseEvent.Equal(leaseEvent) {
		c.metrics.leaseToTopology.Observe(time.Since(leaseEvent).Seconds())
		c.leaseEvent = time.Time{}
	}
	c.metrics.generation.Set(float64(gen))
	c.metrics.published.Inc()
	var ready, notReady, stale float64
	for _, u := range slices.Concat(t.Upstreams, t.Unproven) {
		switch {
		case u.Ready:
			ready++
		default:
			notReady++
		}
		if u.Stale {
			stale++
		}
	}
	c.metrics.upstreams.WithLabelValues(stateReady).Set(ready)
	c.metrics.upstreams.WithLabelValues(stateNotReady).Set(notReady)
	c.metrics.upstreams.WithLabelValues(stateStale).Set(stale)
	c.log.Info("topology published", zap.String("version", t.Version), zap.Int("upstreams", len(t.Upstreams)),
		zap.Int("sets", len(t.Sets)), zap.Int("skewed", len(t.Skewed())), zap.Duration("rebuild", time.Since(start)))
	return next
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// reconcileWorkers starts a worker for every new candidate, restarts one whose address changed,
// stops the ones no longer wanted, and asks for a refetch when a Lease holder changed (a restarted
// apiserver, maybe of another version).
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
				c.departed[name] = departure{api: s.api, apis: s.apis, until: c.cfg.Now().Add(c.cfg.DepartedTTL)}
				c.log.Info("upstream departed", zap.String("upstream", name), zap.Duration("unavailableFor", c.cfg.DepartedTTL))
			}
			delete(c.states, name)
			c.mu.Unlock()
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
		// New checked that the config builds a client; only the address differs here.
		f, err := newFetcher(c.cfg.Upstream, cand.Address, c.cfg.MaxDocumentBytes)
		if err != nil {
			if !known {
				c.log.Error("cannot build a client for upstream", zap.String("upstream", cand.Name), zap.Error(err))
			}
			c.mu.Lock()
			c.states[cand.Name].initialized = true // no wake: this rebuild already counts it
			c.mu.Unlock()
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{name: cand.Name, addr: cand.Address, holder: cand.Holder, f: f, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
		c.workers[cand.Name] = w
		go c.runWorker(wctx, w)
	}
}

// departure remembers what a departed upstream served.
type departure struct {
	api, apis *Document
	until     time.Time
}

// fingerprint hashes everything a consumer can see in a Topology but its version and time.
func fingerprint(t *Topology) [32]byte {
	data, err := json.Marshal(struct {
		U  []Upstream
		P  []Upstream
		I  []IgnoredLease
		S  []CapabilitySet
		K  []SkewedResource
		E1 string
		E2 string
	}{t.Upstreams, t.Unproven, t.Ignored, t.Sets, t.Skewed(), t.API.ETag, t.APIs.ETag})
	if err != nil {
		panic(err)
	}
	return sha256.Sum256(data)
}

// noteRejections logs and counts each refused Lease address once per Lease and address, and forgets
// the Leases that no longer exist: what it keeps is bounded by the Leases in the informer's cache,
// whatever their writers put in annotations.
func (c *Controller) noteRejections(rejected []rejection, leases []*coordinationv1.Lease) {
	for _, r := range rejected {
		digest := sha256.Sum256([]byte(r.Annotation))
		if prev, ok := c.seenRej[r.Lease]; ok && prev == digest {
			continue
		}
		c.seenRej[r.Lease] = digest
		c.metrics.rejectedLeases.WithLabelValues(r.Reason).Inc()
		c.log.Warn("identity Lease address refused by the address policy; never routed to",
			zap.String("lease", r.Lease), zap.String("reason", r.Reason), zap.Error(r.Err))
	}
	if len(c.seenRej) == 0 {
		return
	}
	exists := make(map[string]bool, len(leases))
	for _, l := range leases {
		exists[l.Name] = true
	}
	maps.DeleteFunc(c.seenRej, func(name string, _ [sha256.Size]byte) bool { return !exists[name] })
}

// noteIgnored sets the ignored-Lease gauges and logs a Lease when it becomes ignored or its reason
// changes (the address policy's refusals are logged by noteRejections).
func (c *Controller) noteIgnored(ignored []IgnoredLease) {
	counts := map[string]float64{}
	now := make(map[string]string, len(ignored))
	for _, l := range ignored {
		counts[l.Reason]++
		now[l.Lease] = l.Reason
		if c.ignoredLogged[l.Lease] == l.Reason || l.Reason == RejectMalformed || l.Reason == RejectNotAllowed {
			continue
		}
		c.log.Warn("identity Lease is no upstream", zap.String("lease", l.Lease), zap.String("hostname", l.Hostname),
			zap.String("reason", l.Reason), zap.String("hint", l.Hint))
	}
	c.ignoredLogged = now
	for _, r := range ignoredReasons {
		c.metrics.ignoredLeases.WithLabelValues(r).Set(counts[r])
	}
}
