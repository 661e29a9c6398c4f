package discovery

import (
	"context"
	"fmt"
	"net/netip"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

func (c *Controller) startInformers(ctx context.Context) error {
	var synced []cache.InformerSynced
	if c.cfg.Client != nil {
		leaseFactory := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0,
			informers.WithNamespace(LeaseNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = IdentityLabelSelector }))
		li := leaseFactory.Coordination().V1().Leases()
		if _, err := li.Informer().AddEventHandler(c.leaseHandler()); err != nil {
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
			if _, err := ei.Informer().AddEventHandler(c.enqueueOnAnyChange()); err != nil {
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
			AddFunc:    func(any) { c.refetchAfterAPIChange() },
			UpdateFunc: func(any, any) { c.refetchAfterAPIChange() },
			DeleteFunc: func(any) { c.refetchAfterAPIChange() },
		}
		for _, gvr := range []schema.GroupVersionResource{crdGVR, apiServiceGVR} {
			inf := mf.ForResource(gvr).Informer()
			if _, err := inf.AddEventHandler(refetchAll); err != nil {
				return err
			}
			synced = append(synced, inf.HasSynced)
		}
		apiServices := mf.ForResource(apiServiceGVR).Lister()
		c.apiServicesSynced = mf.ForResource(apiServiceGVR).Informer().HasSynced
		c.apiServices = func() []*metav1.PartialObjectMetadata {
			l, _ := apiServices.List(labels.Everything())
			out := make([]*metav1.PartialObjectMetadata, 0, len(l))
			for _, o := range l {
				if m, ok := o.(*metav1.PartialObjectMetadata); ok {
					out = append(out, m)
				}
			}
			return out
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

// leaseHandler asks for a sync when a Lease changed in a way readLeases can see. A renewal alone
// (every apiserver renews every 10 s) asks for nothing: going stale is noticed by the sync scheduled
// for the earliest expiry, and a renewal matters only for a Lease that was or is stale.
func (c *Controller) leaseHandler() cache.ResourceEventHandler {
	changed := func() {
		c.mu.Lock()
		if c.leaseEvent.IsZero() {
			c.leaseEvent = c.cfg.Clock.Now()
		}
		c.mu.Unlock()
		c.requestSync()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*coordinationv1.Lease)
			n, ok2 := newObj.(*coordinationv1.Lease)
			if !ok1 || !ok2 || c.leaseChanged(o, n) {
				changed()
			}
		},
		DeleteFunc: func(any) { changed() },
	}
}

// leaseChanged reports whether n differs from o in anything readLeases reads, a renew time that
// makes it live again or stale included.
func (c *Controller) leaseChanged(o, n *coordinationv1.Lease) bool {
	oa, oHas := o.Annotations[PeerAddressAnnotation]
	na, nHas := n.Annotations[PeerAddressAnnotation]
	if oa != na || oHas != nHas || o.Labels[HostnameLabel] != n.Labels[HostnameLabel] ||
		!o.CreationTimestamp.Equal(&n.CreationTimestamp) || holderOf(o) != holderOf(n) {
		return true
	}
	if (o.Spec.RenewTime == nil) != (n.Spec.RenewTime == nil) {
		return true
	}
	if n.Spec.RenewTime == nil {
		return false
	}
	now := c.cfg.Clock.Now()
	live := func(l *coordinationv1.Lease) bool { return l.Spec.RenewTime.Add(c.cfg.StaleAfter).After(now) }
	return !live(o) || !live(n)
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// enqueueOnAnyChange asks for a sync on every event (EndpointSlice changes are rare).
func (c *Controller) enqueueOnAnyChange() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.requestSync() },
		UpdateFunc: func(any, any) { c.requestSync() },
		DeleteFunc: func(any) { c.requestSync() },
	}
}

func (c *Controller) endpoints() []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range c.slices() {
		// Only the slice the apiservers maintain themselves; anyone who can create EndpointSlices in
		// default can label another one kubernetes.io/service-name=kubernetes.
		if s.Namespace != "default" || s.Name != "kubernetes" {
			continue
		}
		// Nor the addresses skewgate itself wrote there (`serve --kubernetes-endpoints`): they are
		// fronts, or addresses this very discovery already accepted, and a member Lease writer must
		// not make discovery trust an address by getting it published.
		if s.Labels[discoveryv1.LabelManagedBy] == SkewgateManagedBy {
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
