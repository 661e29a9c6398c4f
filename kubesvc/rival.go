package kubesvc

import (
	"strings"
	"time"

	"go.uber.org/zap"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// rivalState tells skewgate's writes from a rival's and keeps skewgate from fighting one.
//
// A rival is another writer of the kubernetes endpoints: above all an apiserver still running the
// lease reconciler (--endpoint-reconciler-type other than none), which rewrites both objects to the
// apiservers' addresses within its 10s interval whenever they differ, and rebuilds the
// EndpointSlice's labels, dropping skewgate's mark. Writing back at once would flap the endpoints
// every few seconds; instead skewgate waits, 5s after the first rival write and twice as long after
// each next one up to 5m, and then takes the objects back once. The rival's set (the apiservers'
// own addresses) is what the cluster had without skewgate, so yielding costs no availability. The
// backoff starts over once no rival was seen for 5m. An emptied slice is taken back at once: an
// empty set is worse than any.
type rivalState struct {
	seenOurs bool      // the slice carried skewgate's mark since this process started
	lastKey  string    // the rival write last counted (resourceVersion and addresses)
	last     time.Time // when it was seen
	delay    time.Duration
	until    time.Time
}

// contentEqual: same endpoints and ports, whoever wrote them.
func contentEqual(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && apiequality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		apiequality.Semantic.DeepEqual(a.Ports, b.Ports)
}

// check looks at the current slice before a write; a positive result is how long to hold off.
// An unmarked slice with other endpoints than want, after skewgate's mark was seen, is a rival
// write (counted and logged once). Before skewgate ever wrote (the objects as the apiservers left
// them), it is the takeover, no rival.
func (r *rivalState) check(c *Controller, cur, want *discoveryv1.EndpointSlice, now time.Time) time.Duration {
	if markedSlice(cur) {
		r.seenOurs = true
		return 0
	}
	if contentEqual(cur, want) || !r.seenOurs {
		return 0
	}
	empty := len(cur.Endpoints) == 0
	if key := cur.ResourceVersion + "/" + sliceAddrs(cur); key != r.lastKey {
		if empty {
			// The last apiserver on the lease reconciler empties the set when it stops (lease.go
			// RemoveEndpoints after StopReconciling): never leave the Service without an endpoint.
			r.lastKey = key
			c.m.rivals.Inc()
			c.log.Error("another writer emptied the kubernetes EndpointSlice (the last apiserver on the lease reconciler stopping?); writing it back at once")
			return 0
		}
		if !r.last.IsZero() && now.Sub(r.last) > rivalBackoffMax {
			r.delay = 0
		}
		r.delay = min(max(2*r.delay, rivalBackoffMin), rivalBackoffMax)
		r.lastKey, r.last, r.until = key, now, now.Add(r.delay)
		c.m.rivals.Inc()
		c.log.Error("another writer changed the kubernetes EndpointSlice (an apiserver whose --endpoint-reconciler-type is not none?); not writing back before the backoff",
			zap.String("addresses", sliceAddrs(cur)), zap.Duration("backoff", r.delay))
	}
	if !empty && now.Before(r.until) {
		return r.until.Sub(now)
	}
	return 0
}

// yielded: an unmarked slice that already has the wanted endpoints is left alone; rewriting only
// the mark would fight the apiserver over a label.
func (r *rivalState) yielded(cur, want *discoveryv1.EndpointSlice) bool {
	return !markedSlice(cur) && contentEqual(cur, want)
}

func sliceAddrs(s *discoveryv1.EndpointSlice) string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return strings.Join(out, ",")
}
