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

// outlier enforces a cluster's outlier_detection for consecutive failures as
// source/common/upstream/outlier_detection_impl.cc does (read at envoyproxy/envoy 00c7146d95, a
// recent main copy and the only one the source index holds; router.cc in several copies):
//
//   - A response code goes to putHttpResponseCode whatever split_external_local_origin_errors says
//     (router.cc, Filter::onUpstreamHeaders): 502/503/504 count as gateway failures, any 5xx as a
//     consecutive 5xx (a 5xx that is no gateway error resets the gateway count), anything else
//     resets both. So in split mode too an upstream's own 503 answers count, and eject when
//     enforcing_consecutive_gateway_failure says so.
//   - With split_external_local_origin_errors the router's LOCAL_ORIGIN_CONNECT_SUCCESS, reported
//     when a stream gets its connection (upstream_request.cc, onPoolReady), resets the
//     local-origin count; LOCAL_ORIGIN_CONNECT_FAILED, reported for every upstream reset, before or
//     after the response headers and one the upstream sent over the wire included (router.cc,
//     Filter::onUpstreamReset), and LOCAL_ORIGIN_TIMEOUT count as consecutive local-origin failures.
//     Without split they are a 503 (and 504) response code (resultToHttpCode).
//   - A counter reaching its threshold is a detection (onConsecutiveErrorWorker): nothing if the
//     host is ejected already; otherwise ejectHost ejects when 100 x (ejected + 1) / hosts is at most
//     max_ejection_percent and the enforcing_* percentage rolls true; either way the counter of that
//     kind restarts from zero.
//   - An ejected host comes back after base_ejection_time x its back-off (capped at
//     max_ejection_time), checked every interval, or on a passing active health check
//     (successful_active_health_check_uneject_host, default true); unejection restarts every counter.
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

// connectFailed: LOCAL_ORIGIN_CONNECT_FAILED, an upstream reset or a failed connection.
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
		o.detected(h, kindLocal)
	}
}

// connected: LOCAL_ORIGIN_CONNECT_SUCCESS, the stream has its upstream connection. Without split
// it is no response code and changes nothing (resultToHttpCode returns none).
func (o *outlier) connected(h *host) {
	if !o.cfg.SplitExternalLocalOriginErrors {
		return
	}
	h.od.mu.Lock()
	h.od.consecLocal = 0
	h.od.mu.Unlock()
}

// httpStatus: the upstream's response code (putHttpResponseCode), in either mode.
func (o *outlier) httpStatus(h *host, code int) {
	if code < 500 || code > 599 {
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
		o.detected(h, kindGateway)
	}
	if hit5 {
		o.detected(h, kind5xx)
	}
}

// The consecutive-failure kinds (envoy.data.cluster.v3.OutlierEjectionType).
type failureKind int

const (
	kind5xx failureKind = iota
	kindGateway
	kindLocal
)

// enforcing is the kind's enforcing_* percentage with Envoy's defaults (outlier_detection.h:
// DEFAULT_ENFORCING_CONSECUTIVE_5XX 100, ..._GATEWAY_FAILURE 0, ..._LOCAL_ORIGIN_FAILURE 100).
func (o *outlier) enforcing(k failureKind) uint32 {
	switch k {
	case kindGateway:
		return u32(o.cfg.EnforcingConsecutiveGatewayFailure, 0)
	case kindLocal:
		return u32(o.cfg.EnforcingConsecutiveLocalOriginFailure, 100)
	}
	return u32(o.cfg.EnforcingConsecutive_5Xx, 100)
}

// detected is onConsecutiveErrorWorker: a counter of kind k reached its threshold.
func (o *outlier) detected(h *host, k failureKind) {
	if h.ejected.Load() {
		return
	}
	o.ejectHost(h, k)
	h.od.mu.Lock()
	switch k {
	case kind5xx:
		h.od.consec5 = 0
	case kindGateway:
		h.od.consecGateway = 0
	case kindLocal:
		h.od.consecLocal = 0
	}
	h.od.mu.Unlock()
}

// ejectHost: max_ejection_percent counts the host about to go (ejected + 1), then the enforcing
// percentage rolls (runtime featureEnabled: a random number below 100 under the percentage).
func (o *outlier) ejectHost(h *host, k failureKind) {
	ejected := 0
	for _, x := range o.c.hosts {
		if x.ejected.Load() {
			ejected++
		}
	}
	if 100*float64(ejected+1)/float64(len(o.c.hosts)) > float64(min(u32(o.cfg.MaxEjectionPercent, 10), 100)) {
		return
	}
	if uint32(o.c.dp.intn(100)) >= o.enforcing(k) {
		return
	}
	h.od.mu.Lock()
	h.od.numEjections++
	h.od.ejectedAt = time.Now()
	h.od.mu.Unlock()
	h.ejected.Store(true)
	o.c.dp.logf("cluster %s: outlier detection ejected %s", o.c.name, h.addr)
}

func (o *outlier) uneject(h *host) {
	h.od.mu.Lock()
	h.od.consecLocal, h.od.consecGateway, h.od.consec5 = 0, 0, 0
	h.od.mu.Unlock()
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
