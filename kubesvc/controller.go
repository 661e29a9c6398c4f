package kubesvc

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// keyReconcile is the one work queue key: every event asks for the same full recomputation.
const keyReconcile = "reconcile"

// fieldManager names skewgate's writes in managedFields.
const fieldManager = "skewgate-kubesvc"

// store is what a reconcile reads: the member Leases and the two objects (a NotFound error when one
// is missing). Run reads them from informers; unit tests from the clientset itself.
type store interface {
	leases() []*coordinationv1.Lease
	endpoints() (*corev1.Endpoints, error)
	slice() (*discoveryv1.EndpointSlice, error)
}

// Controller is one member: it heartbeats its Lease and writes the kubernetes endpoints.
//
// Informer handlers, the heartbeat and the Topology watch only enqueue; reconcile runs under mu (the
// queue's worker, or shutdown) and owns the rest.
type Controller struct {
	cfg   Config
	log   *zap.Logger
	m     *metrics
	queue workqueue.TypedRateLimitingInterface[string]
	store store
	// stopping: this member is leaving; reconcile leaves it out of the set.
	stopping atomic.Bool
	// own is the member Lease this member last wrote (renew): reconcile reads it in place of the
	// cache's older copy, so a member that just renewed (or, restarted, created) its Lease never
	// computes a set without itself because its own informer has not seen that write yet.
	own atomic.Pointer[coordinationv1.Lease]
	// synced: the store is complete; before that a shutdown only deletes the Lease (an empty cache
	// would read as "no member", and the set must not be computed from it).
	synced atomic.Bool

	mu        sync.Mutex
	obs       *observer
	badLogged map[string]string // Lease name -> reason and annotation last logged
	rival     rivalState
	peer      peerState
	published string // the set last written or found in place, for one log line per change
	missing   map[string]bool
}

// New checks cfg and returns a Controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Controller{
		cfg: cfg,
		log: cfg.Logger.Named("kubesvc").With(zap.String("member", cfg.Member), zap.Stringer("endpoint", cfg.Endpoint)),
		m:   cfg.Metrics.m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: cfg.Clock}),
		obs:       newObserver(cfg.Clock),
		badLogged: map[string]string{},
		missing:   map[string]bool{},
	}, nil
}

// Run heartbeats and reconciles until ctx ends, then removes this member (Shutdown) and returns.
// The informers outlive ctx until the removal is written.
func (c *Controller) Run(ctx context.Context) error {
	ictx, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	synced, err := c.startInformers(ictx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	// The heartbeat ends before Shutdown deletes the Lease, so no renewal in flight recreates it.
	var beat sync.WaitGroup
	beat.Add(1)
	go func() { defer beat.Done(); c.heartbeatLoop(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); c.watchTopology(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		beat.Wait()
		c.Shutdown()
		return nil
	}
	c.synced.Store(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c.processNext(ictx) {
		}
	}()
	<-ctx.Done()
	beat.Wait()
	c.Shutdown()
	return nil
}

func (c *Controller) startInformers(ctx context.Context) ([]cache.InformerSynced, error) {
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(keyReconcile) },
		UpdateFunc: func(any, any) { c.queue.Add(keyReconcile) },
		DeleteFunc: func(any) { c.queue.Add(keyReconcile) },
	}
	lf := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = MemberLabel + "=true" }))
	// RBAC grants the two objects by resourceNames; list and watch match them through this selector.
	of := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0, informers.WithNamespace(ServiceNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + ServiceName }))
	li, ei, si := lf.Coordination().V1().Leases(), of.Core().V1().Endpoints(), of.Discovery().V1().EndpointSlices()
	if err := li.Informer().SetTransform(slimLease); err != nil {
		return nil, err
	}
	for _, inf := range []cache.SharedIndexInformer{li.Informer(), ei.Informer(), si.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return nil, err
		}
	}
	c.store = listerStore{li: li.Lister(), ei: ei.Lister(), si: si.Lister()}
	lf.Start(ctx.Done())
	of.Start(ctx.Done())
	return []cache.InformerSynced{li.Informer().HasSynced, ei.Informer().HasSynced, si.Informer().HasSynced}, nil
}

// listerStore reads the informers' caches.
type listerStore struct {
	li coordinationlisters.LeaseLister
	ei corelisters.EndpointsLister
	si discoverylisters.EndpointSliceLister
}

func (s listerStore) leases() []*coordinationv1.Lease {
	l, _ := s.li.Leases(Namespace).List(labels.Everything())
	return l
}

func (s listerStore) endpoints() (*corev1.Endpoints, error) {
	return s.ei.Endpoints(ServiceNamespace).Get(ServiceName)
}

func (s listerStore) slice() (*discoveryv1.EndpointSlice, error) {
	return s.si.EndpointSlices(ServiceNamespace).Get(ServiceName)
}

func (c *Controller) watchTopology(ctx context.Context) {
	for {
		_, changed := c.cfg.Source.Watch()
		c.queue.Add(keyReconcile)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	next, err := c.reconcile(ctx)
	if err != nil {
		c.log.Debug("reconcile failed; retrying", zap.Error(err))
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if next > 0 {
		c.queue.AddAfter(key, next)
	}
	return true
}
