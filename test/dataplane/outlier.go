package dataplane

import (
	"context"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// outlierHost is a host's outlier detection state (DetectorHostMonitorImpl).
type outlierHost struct {
	mu                                  sync.Mutex
	consecLocal, consecGateway, consec5 uint32
	numEjections                        int
	ejectedAt                           time.Time
}

// outlier enforces a cluster's outlier_detection as source/common/upstream/
// outlier_detection_impl.cc does for consecutive failures: with split_external_local_origin_errors
// connect failures and resets (the router reports every upstream reset as
// LOCAL_ORIGIN_CONNECT_FAILED) count as consecutive local-origin failures and any response resets
// that count; without it they count as a 503. Responses 502/503/504 count as gateway failures, any
// 5xx as consecutive 5xx (another 5xx resets the gateway count); other statuses reset both. Reaching a threshold ejects the host when the
// enforcing_* percentage rolls true and no more than max_ejection_percent of hosts are ejected. An
// ejected host is unejected after base_ejection_time x its ejection count (capped at
// max_ejection_time), checked every interval, or by a passing active health check.
type outlier struct {
	c   *cluster
	cfg *clusterv3.OutlierDetection
}

func newOutlier(c *cluster, cfg *clusterv3.OutlierDetection) *outlier {
	return &outlier{c: c, cfg: cfg}
}

func u32(v *wrapperspb.UInt32Value, def uint32) uint32 {
	if v == nil {
		return def
	}
	return v.Value
}

func (o *outlier) unejectOnActivePass() bool {
	if v := o.cfg.SuccessfulActiveHealthCheckUnejectHost; v != nil {
		return v.Value
	}
	return true
}

// connectFailed: LOCAL_ORIGIN_CONNECT_FAILED.
func (o *outlier) connectFailed(h *host) {
	if !o.cfg.SplitExternalLocalOriginErrors {
		o.httpStatus(h, 503)
		return
	}
	h.od.mu.Lock()
	h.od.consecLocal++
	hit := h.od.consecLocal == u32(o.cfg.ConsecutiveLocalOriginFailure, 5)
	h.od.mu.Unlock()
	if hit {
		o.eject(h, u32(o.cfg.EnforcingConsecutiveLocalOriginFailure, 100))
	}
}

// connected: LOCAL_ORIGIN_CONNECT_SUCCESS, the upstream answered.
func (o *outlier) connected(h *host) {
	h.od.mu.Lock()
	h.od.consecLocal = 0
	h.od.mu.Unlock()
}

// httpStatus: the upstream's response code.
func (o *outlier) httpStatus(h *host, code int) {
	if code < 500 {
		h.od.mu.Lock()
		h.od.consecGateway, h.od.consec5 = 0, 0
		h.od.mu.Unlock()
		return
	}
	h.od.mu.Lock()
	gwHit := false
	if code == 502 || code == 503 || code == 504 {
		h.od.consecGateway++
		gwHit = h.od.consecGateway == u32(o.cfg.ConsecutiveGatewayFailure, 5)
	} else {
		h.od.consecGateway = 0
	}
	h.od.consec5++
	hit5 := h.od.consec5 == u32(o.cfg.Consecutive_5Xx, 5)
	h.od.mu.Unlock()
	if gwHit {
		o.eject(h, u32(o.cfg.EnforcingConsecutiveGatewayFailure, 0))
	}
	if hit5 {
		o.eject(h, u32(o.cfg.EnforcingConsecutive_5Xx, 100))
	}
}

func (o *outlier) eject(h *host, enforcing uint32) {
	if h.ejected.Load() || uint32(o.c.dp.intn(100)) >= enforcing {
		return
	}
	ejected := 0
	for _, x := range o.c.hosts {
		if x.ejected.Load() {
			ejected++
		}
	}
	if 100*float64(ejected)/float64(len(o.c.hosts)) >= float64(u32(o.cfg.MaxEjectionPercent, 10)) {
		return
	}
	h.od.mu.Lock()
	h.od.numEjections++
	h.od.ejectedAt = time.Now()
	h.od.consecLocal, h.od.consecGateway, h.od.consec5 = 0, 0, 0
	h.od.mu.Unlock()
	h.ejected.Store(true)
	o.c.dp.logf("cluster %s: outlier detection ejected %s", o.c.name, h.addr)
}

func (o *outlier) uneject(h *host) {
	h.ejected.Store(false)
	o.c.dp.logf("cluster %s: %s unejected", o.c.name, h.addr)
}

// run is the detector's interval timer: it unejects hosts whose ejection time has passed.
func (o *outlier) run(ctx context.Context) {
	interval := durationOr(o.cfg.Interval.AsDuration(), 10*time.Second)
	base := durationOr(o.cfg.BaseEjectionTime.AsDuration(), 30*time.Second)
	maxT := durationOr(o.cfg.MaxEjectionTime.AsDuration(), 300*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, h := range o.c.hosts {
			h.od.mu.Lock()
			if h.ejected.Load() {
				d := min(base*time.Duration(h.od.numEjections), max(base, maxT))
				if time.Since(h.od.ejectedAt) >= d {
					h.od.mu.Unlock()
					o.uneject(h)
					continue
				}
			} else if h.od.numEjections > 0 {
				h.od.numEjections-- // the ejection multiplier decays while the host stays in
			}
			h.od.mu.Unlock()
		}
	}
}
