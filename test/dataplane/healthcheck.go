package dataplane

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// hcResult is the outcome of one active health check.
type hcResult int

const (
	hcPass           hcResult = iota
	hcFail                    // an HTTP answer outside expected_statuses
	hcRetriableFail           // an HTTP answer in retriable_statuses
	hcNetwork                 // connection or stream failure (NETWORK)
	hcNetworkTimeout          // no answer within timeout (NETWORK_TIMEOUT)
)

// startHealthChecks runs HTTP active health checks on every host (source/extensions/
// health_checkers/http/health_checker_impl.cc with source/common/upstream/health_checker_impl.cc).
// The check uses its own connections over the transport socket that transport_socket_match_criteria
// selects from transport_socket_matches (or the host's own socket without criteria), and the codec
// of codec_client_type (HTTP/1.1 unless HTTP2).
func (c *cluster) startHealthChecks(ctx context.Context) {
	hh := c.hc.GetHttpHealthCheck()
	http1 := hh.CodecClientType != typev3.CodecClientType_HTTP2
	crit := c.hc.GetTransportSocketMatchCriteria()
	for _, h := range c.hosts {
		i := h.sock
		if crit != nil {
			i = c.resolveSocket(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: crit}}, nil)
		}
		tr := c.newTransport(c.socket(i), http1)
		scheme := "https"
		if c.socket(i) == nil {
			scheme = "http"
		}
		client := &http.Client{Transport: tr, Timeout: durationOr(c.hc.Timeout.AsDuration(), time.Second)}
		go func() {
			for {
				r := c.check(ctx, client, scheme, h)
				if ctx.Err() != nil {
					return
				}
				changed := c.record(h, r)
				if !h.checked.Swap(true) && c.pending.Add(-1) == 0 {
					c.warmOnce.Do(func() { close(c.warmed) })
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(c.hcInterval(h, changed)):
				}
			}
		}()
	}
}

// check sends GET path with Host (default: the cluster name) and request_headers_to_add; a
// status in expected_statuses (default [200, 201)) passes.
func (c *cluster) check(ctx context.Context, client *http.Client, scheme string, h *host) hcResult {
	hh := c.hc.GetHttpHealthCheck()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+h.addr+hh.Path, nil)
	req.Host = hh.Host
	if req.Host == "" {
		req.Host = c.name
	}
	for _, o := range hh.RequestHeadersToAdd {
		setHeader(req.Header, o.Header.Key, o.Header.Value, o.AppendAction)
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
			return hcNetworkTimeout
		}
		return hcNetwork
	}
	resp.Body.Close()
	if inRanges(hh.ExpectedStatuses, resp.StatusCode, 200, 201) {
		return hcPass
	}
	if len(hh.RetriableStatuses) > 0 && inRanges(hh.RetriableStatuses, resp.StatusCode, 0, 0) {
		return hcRetriableFail
	}
	return hcFail
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func inRanges(rs []*typev3.Int64Range, code, defStart, defEnd int) bool {
	if len(rs) == 0 {
		return code >= defStart && code < defEnd
	}
	for _, r := range rs {
		if int64(code) >= r.Start && int64(code) < r.End {
			return true
		}
	}
	return false
}

// record applies a result as ActiveHealthCheckSession::handleSuccess / setUnhealthy do: a pass
// clears the failure count and makes a failed host healthy on its first check or after
// healthy_threshold passes in a row (and un-ejects an outlier-ejected host:
// successful_active_health_check_uneject_host, default true); a non-network failure that is not
// retriable marks a healthy host unhealthy at once; network failures (and retriable statuses)
// do after unhealthy_threshold in a row. It returns whether the health changed.
func (c *cluster) record(h *host, r hcResult) bool {
	h.hcmu.Lock()
	defer h.hcmu.Unlock()
	first := !h.checked.Load()
	if r == hcPass {
		h.numUnhealthy = 0
		changed := false
		if !h.healthy.Load() {
			h.numHealthy++
			if first || h.numHealthy >= int(c.hc.GetHealthyThreshold().GetValue()) {
				h.hcExcluded.Store(false) // EXCLUDED_VIA_IMMEDIATE_HC_FAIL clears with FAILED_ACTIVE_HC
				h.healthy.Store(true)
				h.numHealthy = 0
				changed = true
			}
		}
		if c.od != nil && h.ejected.Load() && c.od.unejectOnActivePass() {
			c.od.uneject(h)
		}
		return changed
	}
	h.numHealthy = 0
	if !h.healthy.Load() {
		return false
	}
	network := r == hcNetwork || r == hcNetworkTimeout
	if !network && r != hcRetriableFail {
		h.healthy.Store(false)
		return true
	}
	h.numUnhealthy++
	if h.numUnhealthy >= int(c.hc.GetUnhealthyThreshold().GetValue()) {
		h.healthy.Store(false)
		return true
	}
	return false
}

// hcInterval is HealthCheckerImplBase::interval: no_traffic_interval (default 60 s) until the
// cluster carried traffic, then unhealthy_interval / the edge intervals when set, else interval.
func (c *cluster) hcInterval(h *host, changed bool) time.Duration {
	hc := c.hc
	interval := durationOr(hc.Interval.AsDuration(), time.Second)
	healthy := h.healthy.Load()
	if !c.traffic.Load() {
		if healthy && hc.NoTrafficHealthyInterval != nil {
			return hc.NoTrafficHealthyInterval.AsDuration()
		}
		return durationOr(hc.NoTrafficInterval.AsDuration(), 60*time.Second)
	}
	switch {
	case changed && healthy && hc.HealthyEdgeInterval != nil:
		return hc.HealthyEdgeInterval.AsDuration()
	case changed && !healthy && hc.UnhealthyEdgeInterval != nil:
		return hc.UnhealthyEdgeInterval.AsDuration()
	case !healthy && hc.UnhealthyInterval != nil:
		return hc.UnhealthyInterval.AsDuration()
	}
	return interval
}
