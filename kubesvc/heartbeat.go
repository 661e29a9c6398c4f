package kubesvc

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ServerName is what the front's certificate is verified for: the node's apiserver.crt, which
// every in-cluster client verifies for the same name.
const ServerName = "kubernetes.default.svc"

// TLSProbe is the default front probe: a TLS handshake with the endpoint whose certificate verifies
// against roots for ServerName, within timeout. It proves that Envoy listens and serves the
// certificate clients of the Service accept, not that an apiserver behind it answers (discovery's
// readiness says that).
func TLSProbe(roots *tls.Config, timeout time.Duration) ProbeFunc {
	return func(ctx context.Context, ep netip.AddrPort) error {
		cfg := roots.Clone()
		cfg.ServerName = ServerName
		cfg.MinVersion = tls.VersionTLS12
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", ep.String())
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

// heartbeatLoop renews this member's Lease every TTL/3 while it is live.
func (c *Controller) heartbeatLoop(ctx context.Context) {
	t := c.cfg.Clock.NewTicker(c.cfg.TTL / 3)
	defer t.Stop()
	for {
		c.heartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// heartbeat renews the Lease only while this member is live: discovery has a ready apiserver and
// the node's front answers. Otherwise it lets the Lease expire (it deletes it only on shutdown), so
// a front that stopped serving leaves the set within the TTL even if this process is wedged.
func (c *Controller) heartbeat(ctx context.Context) {
	if c.stopping.Load() {
		return
	}
	result := c.beat(ctx)
	c.m.heartbeats.WithLabelValues(result).Inc()
	c.queue.Add(keyReconcile)
}

func (c *Controller) beat(ctx context.Context) string {
	t, _ := c.cfg.Source.Watch()
	ready := false
	if t != nil {
		for _, u := range t.Upstreams {
			ready = ready || u.Ready
		}
	}
	if !ready {
		c.log.Debug("not renewing: discovery has no ready apiserver")
		return beatNotReady
	}
	if c.cfg.Probe == nil {
		return beatProbeFailed
	}
	if err := c.cfg.Probe(ctx, c.cfg.Endpoint); err != nil {
		c.log.Debug("not renewing: the front does not answer", zap.Error(err))
		return beatProbeFailed
	}
	if err := c.renew(ctx); err != nil {
		c.log.Warn("renewing this member's Lease failed", zap.Error(err))
		return beatError
	}
	return beatRenewed
}

// renew writes the Lease: renewTime from this node's clock, which readers only compare with
// its previous value (observer).
func (c *Controller) renew(ctx context.Context) error {
	leases := c.cfg.Client.CoordinationV1().Leases(Namespace)
	now := metav1.NewMicroTime(c.cfg.Clock.Now())
	l, err := leases.Get(ctx, c.cfg.Member, metav1.GetOptions{})
	create := isNotFound(err)
	if create {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.cfg.Member, Namespace: Namespace}}
		l.Spec.AcquireTime = &now
	} else if err != nil {
		return err
	}
	l = l.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[MemberLabel] = "true"
	l.Annotations[EndpointAnnotation] = c.cfg.Endpoint.String()
	l.Spec.HolderIdentity = ptr.To(c.cfg.Member)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.cfg.TTL / time.Second))
	l.Spec.RenewTime = &now
	var wrote *coordinationv1.Lease
	if create {
		wrote, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: fieldManager})
	} else {
		wrote, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	if err == nil && !c.stopping.Load() {
		if s, _ := slimLease(wrote); s != nil {
			c.own.Store(s.(*coordinationv1.Lease))
		}
	}
	return err
}

// withOwn is leases with this member's Lease as it last wrote it, where the cache holds none or an
// older renewal of it.
func withOwn(leases []*coordinationv1.Lease, own *coordinationv1.Lease) []*coordinationv1.Lease {
	if own == nil {
		return leases
	}
	out := make([]*coordinationv1.Lease, 0, len(leases)+1)
	for _, l := range leases {
		if l.Name != own.Name {
			out = append(out, l)
			continue
		}
		if l.Spec.RenewTime != nil && own.Spec.RenewTime != nil && l.Spec.RenewTime.After(own.Spec.RenewTime.Time) {
			own = l // the cache has caught up (or another writer renewed it later)
		}
	}
	return append(out, own)
}
