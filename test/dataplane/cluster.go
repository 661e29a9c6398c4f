package dataplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// host is one endpoint of a cluster.
type host struct {
	addr   string // host:port, or unix:///path
	tr     http.RoundTripper
	scheme string
	sock   int // index of the transport socket requests use (-1: transport_socket)
	// healthy is the absence of FAILED_ACTIVE_HC. A host of a health-checked cluster starts
	// failed and becomes healthy at its first passing check (health_checker_impl.cc:
	// first_check_), so it carries no request before it was checked.
	healthy atomic.Bool
	ejected atomic.Bool // FAILED_OUTLIER_CHECK
	// hcExcluded is EXCLUDED_VIA_IMMEDIATE_HC_FAIL (upstreamfilters.go); hcmu guards the active
	// health check state below against that passive failure.
	hcExcluded atomic.Bool
	hcmu       sync.Mutex
	active     atomic.Int64
	checked    atomic.Bool
	// active health check state, owned by the host's checker goroutine
	numHealthy, numUnhealthy int
	od                       outlierHost
}

func (h *host) available() bool {
	return h.healthy.Load() && !h.ejected.Load() && !h.hcExcluded.Load()
}

// cluster is an upstream cluster built from a CDS resource.
type cluster struct {
	dp        *DataPlane
	name      string
	cfg       *clusterv3.Cluster
	hosts     []*host
	http1     bool
	sockets   []*tls.Config // transport_socket_matches, in order
	deflt     *tls.Config   // transport_socket
	hc        *corev3.HealthCheck
	od        *outlier
	upstream  *upstreamFilters // http_filters of the HttpProtocolOptions (upstreamfilters.go)
	traffic   atomic.Bool      // a request was sent: health checks use interval, not no_traffic_interval
	rr        atomic.Uint64
	warmed    chan struct{}
	warmOnce  sync.Once
	pending   atomic.Int64 // hosts not checked yet
	cancel    context.CancelFunc
	grpcOnce  sync.Once
	grpcConn  *grpc.ClientConn
	grpcErr   error
	tmu       sync.Mutex
	transport []*http.Transport
	// secretRefs are the SDS secrets the cluster's transport sockets name.
	secretRefs []string
}

// isHTTP1: the upstream protocol is HTTP/1.1 unless explicit_http_config selects HTTP/2 (Envoy's
// default upstream protocol is HTTP/1.1).
func isHTTP1(c *clusterv3.Cluster) (bool, error) {
	a, ok := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		return true, nil
	}
	var o httpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		return false, err
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil, nil
}

// transportSocketMatchKey is the filter metadata namespace transport_socket_matches match on.
const transportSocketMatchKey = "envoy.transport_socket_match"

// resolveSocket is TransportSocketMatcherImpl::resolve (source/common/upstream/
// transport_socket_match_impl.cc, legacy metadata matching): the first entry of
// transport_socket_matches whose every match field equals the value under
// envoy.transport_socket_match in the endpoint's metadata, else the first that so matches the
// locality's metadata (an entry with an empty match matches anything: metadataLabelMatch);
// otherwise the cluster's transport_socket. -1 is the default.
func (c *cluster) resolveSocket(endpoint, locality *corev3.Metadata) int {
	for _, md := range []*corev3.Metadata{endpoint, locality} {
		fields := md.GetFilterMetadata()[transportSocketMatchKey].GetFields()
		for i, m := range c.cfg.TransportSocketMatches {
			if labelMatch(m.GetMatch(), fields) {
				return i
			}
		}
	}
	return -1
}

func labelMatch(want *structpb.Struct, have map[string]*structpb.Value) bool {
	for k, v := range want.GetFields() {
		got, ok := have[k]
		if !ok || got.String() != v.String() {
			return false
		}
	}
	return true
}

func (c *cluster) socket(i int) *tls.Config {
	if i < 0 {
		return c.deflt
	}
	return c.sockets[i]
}

func (c *cluster) newTransport(tc *tls.Config, http1 bool) *http.Transport {
	d := &net.Dialer{Timeout: durationOr(c.cfg.ConnectTimeout.AsDuration(), 5*time.Second), KeepAlive: 30 * time.Second}
	if tc != nil {
		// net/http's HTTP/2 setup writes the TLS config's NextProtos: never share one between transports
		// (requests and health checks of one socket each get their own).
		tc = tc.Clone()
	}
	tr := &http.Transport{
		TLSClientConfig: tc, MaxIdleConnsPerHost: 100, IdleConnTimeout: time.Hour,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := strings.CutPrefix(addr, "unix:"); ok {
				return d.DialContext(ctx, "unix", strings.TrimSuffix(p, ":0"))
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	p := new(http.Protocols)
	switch {
	case http1:
		p.SetHTTP1(true)
	case tc == nil:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP2(true)
	}
	tr.Protocols = p
	c.tmu.Lock()
	c.transport = append(c.transport, tr)
	c.tmu.Unlock()
	return tr
}

func newCluster(d *DataPlane, cfg *clusterv3.Cluster) (*cluster, error) {
	h1, err := isHTTP1(cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{dp: d, name: cfg.Name, cfg: cfg, http1: h1, warmed: make(chan struct{})}
	if c.upstream, err = parseUpstreamFilters(cfg); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Name, err)
	}
	if c.deflt, err = upstreamTLS(cfg.TransportSocket, d.secrets); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Name, err)
	}
	for _, m := range cfg.TransportSocketMatches {
		tc, err := upstreamTLS(m.TransportSocket, d.secrets)
		if err != nil {
			return nil, fmt.Errorf("cluster %s transport_socket_matches %s: %w", cfg.Name, m.Name, err)
		}
		c.sockets = append(c.sockets, tc)
	}
	if len(cfg.HealthChecks) > 1 {
		return nil, fmt.Errorf("cluster %s: one health check at most", cfg.Name)
	}
	if len(cfg.HealthChecks) == 1 {
		c.hc = cfg.HealthChecks[0]
		if c.hc.GetHttpHealthCheck() == nil {
			return nil, fmt.Errorf("cluster %s: only HTTP health checks are supported", cfg.Name)
		}
	}
	if cfg.OutlierDetection != nil {
		c.od = newOutlier(c, cfg.OutlierDetection)
	}
	if t := cfg.GetType(); t != clusterv3.Cluster_STATIC && t != clusterv3.Cluster_STRICT_DNS {
		return nil, fmt.Errorf("cluster %s: type %v is not supported", cfg.Name, t)
	}
	byIndex := map[int]*http.Transport{}
	for _, l := range cfg.GetLoadAssignment().GetEndpoints() {
		for _, e := range l.LbEndpoints {
			a := e.GetEndpoint().GetAddress()
			h := &host{scheme: "https"}
			switch {
			case a.GetPipe() != nil:
				h.addr = "unix:" + a.GetPipe().Path
			case a.GetSocketAddress() != nil:
				sa := a.GetSocketAddress()
				h.addr = net.JoinHostPort(sa.Address, strconv.Itoa(int(sa.GetPortValue())))
			default:
				return nil, fmt.Errorf("cluster %s: unsupported endpoint address %v", cfg.Name, a)
			}
			// Requests use the socket the endpoint's (and locality's) metadata selects.
			i := c.resolveSocket(e.GetMetadata(), l.GetMetadata())
			if byIndex[i] == nil {
				byIndex[i] = c.newTransport(c.socket(i), h1)
			}
			h.tr, h.sock = byIndex[i], i
			if c.socket(i) == nil {
				h.scheme = "http"
			}
			h.healthy.Store(c.hc == nil)
			c.hosts = append(c.hosts, h)
		}
	}
	c.pending.Store(int64(len(c.hosts)))
	c.secretRefs = secretNames(cfg.TransportSocket)
	for _, m := range cfg.TransportSocketMatches {
		c.secretRefs = append(c.secretRefs, secretNames(m.TransportSocket)...)
	}
	return c, nil
}

func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// start initializes the cluster: like Envoy's cluster init manager it first waits for the SDS
// secrets its transport sockets name, then runs the first health checks; the cluster is warmed
// when both are done.
func (c *cluster) start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	go func() {
		for !c.secretsReady() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if c.hc != nil && len(c.hosts) > 0 {
			c.startHealthChecks(ctx)
		} else {
			c.warmOnce.Do(func() { close(c.warmed) })
		}
		if c.od != nil {
			c.od.run(ctx)
		}
	}()
}

func (c *cluster) secretsReady() bool {
	for _, n := range c.secretRefs {
		if !c.dp.secrets.has(n) {
			return false
		}
	}
	return true
}

func (c *cluster) stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.tmu.Lock()
	for _, t := range c.transport {
		t.CloseIdleConnections()
	}
	c.tmu.Unlock()
	if c.grpcConn != nil {
		conn := c.grpcConn
		time.AfterFunc(time.Minute, func() { conn.Close() }) // let in-flight ext_proc calls end
	}
}
