package kubesvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Shutdown removes this member: its Lease first, then the set without it (the other live members,
// or the apiservers), within ShutdownTimeout, as a stopping apiserver removes its own IP
// (lease.go RemoveEndpoints). It is what Run does when its context ends.
//
// The set is computed from the member Leases as the API has them, not from the informer's cache:
// two members stopping at once would otherwise each still see the other's Lease there and publish
// it (cp1 writes {cp2}, cp2 writes {cp1}), leaving a stopped front with no writer. After a write
// the Leases are listed again, and while the set names a member whose Lease is gone meanwhile, it
// is computed and written again.
func (c *Controller) Shutdown() {
	if c.stopping.Swap(true) {
		return
	}
	c.own.Store(nil)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	err := c.cfg.Client.CoordinationV1().Leases(Namespace).Delete(ctx, c.cfg.Member, metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		c.log.Warn("could not delete this member's Lease on shutdown; it expires after its TTL", zap.Error(err))
	}
	if !c.synced.Load() {
		return
	}
	wrote := false
	for {
		err := c.leave(ctx, &wrote)
		if err == nil {
			if wrote {
				c.log.Info("left the kubernetes endpoints")
			}
			return
		}
		if errors.Is(err, errMemberGone) && ctx.Err() == nil {
			continue // recompute at once: not a failure
		}
		select {
		case <-ctx.Done():
			c.log.Warn("could not write the kubernetes endpoints without this member before the shutdown timeout; the others drop it within the TTL",
				zap.Duration("timeout", c.cfg.ShutdownTimeout), zap.Error(err))
			return
		case <-c.cfg.Clock.After(100 * time.Millisecond):
		}
	}
}

// errMemberGone: the set just written names a member whose Lease is gone (it is stopping too).
var errMemberGone = errors.New("a member in the set written has left meanwhile")

// leave is one round of Shutdown: the set from the API's Leases, written, checked against them again.
func (c *Controller) leave(ctx context.Context, wrote *bool) error {
	st, err := listAPI(ctx, c.cfg.Client)
	if err != nil {
		return err
	}
	_, out, err := c.reconcileFrom(ctx, st)
	*wrote = *wrote || out.wrote
	if err != nil {
		return err
	}
	after, err := listAPI(ctx, c.cfg.Client)
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	for _, l := range after.l {
		exists[l.Name] = true
	}
	for _, m := range out.members {
		if !exists[m] {
			return fmt.Errorf("%w: %s", errMemberGone, m)
		}
	}
	return nil
}

// apiStore reads the API itself (Shutdown): the member Leases listed once, the objects at each read.
type apiStore struct {
	ctx context.Context
	c   kubernetes.Interface
	l   []*coordinationv1.Lease
}

func listAPI(ctx context.Context, c kubernetes.Interface) (apiStore, error) {
	l, err := c.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{LabelSelector: MemberLabel + "=true"})
	if err != nil {
		return apiStore{}, err
	}
	st := apiStore{ctx: ctx, c: c}
	for i := range l.Items {
		st.l = append(st.l, &l.Items[i])
	}
	return st, nil
}

func (s apiStore) leases() []*coordinationv1.Lease { return s.l }

func (s apiStore) endpoints() (*corev1.Endpoints, error) {
	return s.c.CoreV1().Endpoints(ServiceNamespace).Get(s.ctx, ServiceName, metav1.GetOptions{})
}

func (s apiStore) slice() (*discoveryv1.EndpointSlice, error) {
	return s.c.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(s.ctx, ServiceName, metav1.GetOptions{})
}
