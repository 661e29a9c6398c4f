package kubesvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// reconcile computes the desired set from the member Leases and the Topology and writes what
// differs. It returns when to look again without any event: the next member expiry or the end of a
// rival backoff (0: only events).
func (c *Controller) reconcile(ctx context.Context) (time.Duration, error) {
	next, _, err := c.reconcileFrom(ctx, c.store)
	return next, err
}

// outcome is what a reconcile published: the members whose endpoints are in the set (none: the
// fallback or nothing), and whether it wrote an object.
type outcome struct {
	members []string
	wrote   bool
}

// reconcileFrom is reconcile reading st.
func (c *Controller) reconcileFrom(ctx context.Context, st store) (time.Duration, outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	t, _ := c.cfg.Source.Watch()
	if t == nil {
		// Before discovery's first Topology no apiserver is known: every member would read as
		// unknown and there is no fallback. The Topology watch enqueues once it is published.
		return 0, outcome{}, nil
	}
	leases := st.leases()
	if !c.stopping.Load() {
		leases = withOwn(leases, c.own.Load())
	}
	c.obs.observe(leases)
	pol := memberPolicy{port: c.cfg.Endpoint.Port(), apiservers: apiserverAddrs(t), cidrs: c.cfg.EndpointCIDRs, ttl: c.cfg.TTL}
	members, bad := pol.validate(leases)
	var live []member
	var next time.Duration
	stopping := c.stopping.Load()
	for _, m := range members {
		if stopping && m.name == c.cfg.Member {
			continue
		}
		if exp := c.obs.expiry(m); exp.After(now) {
			if len(live) >= c.cfg.MaxMembers {
				bad[m.name] = rejection{reason: BadMaxMembers, annotation: m.endpoint.String(), err: fmt.Errorf("more than %d live members", c.cfg.MaxMembers)}
				continue
			}
			live = append(live, m)
			if d := exp.Sub(now); next == 0 || d < next {
				next = d
			}
		}
	}
	c.noteBad(bad)
	c.m.liveMembers.Set(float64(len(live)))
	d := desiredSet(live, c.cfg.Endpoint.Port(), t)
	if d.fallback {
		c.m.fallback.Set(1)
	} else {
		c.m.fallback.Set(0)
	}
	var out outcome
	for _, m := range live {
		out.members = append(out.members, m.name)
	}
	if len(d.ips) == 0 {
		if c.published != "none" {
			c.published = "none"
			c.log.Warn("no live front and no ready apiserver with a publishable address: the kubernetes endpoints are left as they are")
		}
		return next, out, nil
	}
	wait, wrote, err := c.write(ctx, st, d, now)
	out.wrote = wrote
	if wait > 0 && (next == 0 || wait < next) {
		next = wait
	}
	return next, out, err
}

// write brings both objects to d, each only where it differs. The slice is read first: a rival's
// write shows there (rival.go), and then neither object is written until the backoff passes.
func (c *Controller) write(ctx context.Context, st store, d desired, now time.Time) (time.Duration, bool, error) {
	var errs []error
	wrote, wroteEndpoints := false, false
	cs, err := st.slice()
	switch {
	case isNotFound(err):
		c.noteMissing(objEndpointSlice)
	case err != nil:
		errs = append(errs, err)
	default:
		c.missing[objEndpointSlice] = false
		want := wantSlice(cs, d, c.cfg.Member)
		if wait := c.rival.check(c, cs, want, now); wait > 0 {
			return wait, false, nil
		}
		// Another member's write this member disagrees with: held back (peer.go), except when
		// stopping (the set without this member must be written).
		overPeer := markedSlice(cs) && cs.Annotations[WriterAnnotation] != c.cfg.Member && !sliceEqual(cs, want) && !c.stopping.Load()
		if overPeer {
			if wait := c.peer.hold(now); wait > 0 {
				return wait, false, nil
			}
		}
		if !sliceEqual(cs, want) && !(c.rival.yielded(cs, want)) {
			_, err := c.cfg.Client.DiscoveryV1().EndpointSlices(ServiceNamespace).Update(ctx, want, metav1.UpdateOptions{FieldManager: fieldManager})
			c.rival.seenOurs = c.rival.seenOurs || err == nil
			wrote = true
			if overPeer && err == nil {
				c.peer.overwrote(c, cs.Annotations[WriterAnnotation], now)
			}
			errs = append(errs, c.noteWrite(objEndpointSlice, err))
		}
	}
	ce, err := st.endpoints()
	switch {
	case isNotFound(err):
		c.noteMissing(objEndpoints)
	case err != nil:
		errs = append(errs, err)
	default:
		c.missing[objEndpoints] = false
		if want := wantEndpoints(ce, d); !endpointsEqual(ce, want) {
			_, err := c.cfg.Client.CoreV1().Endpoints(ServiceNamespace).Update(ctx, want, metav1.UpdateOptions{FieldManager: fieldManager})
			wroteEndpoints = true
			errs = append(errs, c.noteWrite(objEndpoints, err))
		}
	}
	err = errors.Join(errs...)
	if err == nil && c.published != d.String() {
		c.published = d.String()
		c.log.Info("kubernetes endpoints", zap.Strings("addresses", d.ips), zap.Int32("port", d.port), zap.Bool("fallback", d.fallback))
	}
	return 0, wrote || wroteEndpoints, err
}

func (c *Controller) noteWrite(obj string, err error) error {
	switch {
	case err == nil:
		c.m.writes.WithLabelValues(obj, writeUpdated).Inc()
	case apierrors.IsConflict(err):
		c.m.writes.WithLabelValues(obj, writeConflict).Inc()
	case isNotFound(err):
		c.noteMissing(obj)
		return nil
	default:
		c.m.writes.WithLabelValues(obj, writeError).Inc()
		c.log.Warn("writing the kubernetes endpoints failed", zap.String("object", obj), zap.Error(err))
	}
	return err
}

// noteMissing counts a missing object at every attempt and logs it once until it exists: skewgate
// does not create it (RBAC cannot restrict create to one name).
func (c *Controller) noteMissing(obj string) {
	c.m.writes.WithLabelValues(obj, writeMissing).Inc()
	if !c.missing[obj] {
		c.missing[obj] = true
		c.log.Error("the kubernetes "+obj+" object does not exist and skewgate does not create it; create it (docs/kubernetes-service.md)", zap.String("object", obj))
	}
}

// noteBad logs and counts each ignored member Lease once per reason and annotation, and forgets the
// Leases that are no longer ignored (bounded by the Leases that exist).
func (c *Controller) noteBad(bad map[string]rejection) {
	for name, r := range bad {
		key := r.reason + "\x00" + r.annotation
		if c.badLogged[name] == key {
			continue
		}
		c.badLogged[name] = key
		c.m.badLeases.WithLabelValues(r.reason).Inc()
		c.log.Warn("member Lease ignored", zap.String("lease", name), zap.String("reason", r.reason), zap.Error(r.err))
	}
	for name := range c.badLogged {
		if _, ok := bad[name]; !ok {
			delete(c.badLogged, name)
		}
	}
}
