package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// host is one endpoint of a cluster.
type host struct {
	addr string // host:port, or unix path for pipes
	// healthy follows active health checking; hosts start unhealthy until their first check passes
	// (Envoy: hosts of a cluster with health checks are not used before the first check,
	// arch_overview/upstream/health_checking "initial health check").
	healthy  atomic.Bool
	active   atomic.Int64
	failures int // consecutive failed checks; owned by the checker goroutine
}

// cluster is an upstream cluster built from a CDS resource.
type cluster struct {
	name      string
	hosts     []*host
	http1     bool
	transport *http.Transport
	tlsConfig *tls.Config // nil: plaintext
	cancel    context.CancelFunc
	hc        *corev3.HealthCheck
}

// hostAddresses lists the endpoints of a cluster's load assignment.
func hostAddresses(c *clusterv3.Cluster) ([]string, error) {
	var out []string
	for _, l := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range l.LbEndpoints {
			a := e.GetEndpoint().GetAddress()
			switch {
			case a.GetPipe() != nil:
				out = append(out, "unix://"+a.GetPipe().Path)
			case a.GetSocketAddress() != nil:
				sa := a.GetSocketAddress()
				out = append(out, net.JoinHostPort(sa.Address, strconv.Itoa(int(sa.GetPortValue()))))
			default:
				return nil, fmt.Errorf("cluster %s: unsupported endpoint address %v", c.Name, a)
			}
		}
	}
	return out, nil
}

// secretStore holds the secrets of the last SDS response. Secrets carry file paths; the files are
// read at every TLS handshake, so a rotated file takes effect for new connections (Envoy watches
// the directories of SDS-delivered file paths and reloads them: SDS key rotation).
type secretStore struct {
	m atomic.Pointer[map[string]*tlsv3.Secret]
}

func (s *secretStore) get(name string) (*tlsv3.Secret, error) {
	if m := s.m.Load(); m != nil {
		if sec, ok := (*m)[name]; ok {
			return sec, nil
		}
	}
	return nil, fmt.Errorf("secret %q not received (yet)", name)
}

// certSource returns the certificate of a CommonTlsContext: inline files or an SDS secret.
func certSource(common *tlsv3.CommonTlsContext, secrets *secretStore) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		var tc *tlsv3.TlsCertificate
		switch {
		case len(common.TlsCertificates) > 0:
			tc = common.TlsCertificates[0]
		case len(common.TlsCertificateSdsSecretConfigs) > 0:
			sec, err := secrets.get(common.TlsCertificateSdsSecretConfigs[0].Name)
			if err != nil {
				return nil, err
			}
			tc = sec.GetTlsCertificate()
		default:
			return nil, nil
		}
		pair, err := tls.LoadX509KeyPair(tc.CertificateChain.GetFilename(), tc.PrivateKey.GetFilename())
		return &pair, err
	}
}

// caSource returns the trusted CAs and SAN matchers of a CommonTlsContext's validation: inline, SDS,
// or combined (SAN matchers inline, CA by SDS). ok is false without any validation.
func caSource(common *tlsv3.CommonTlsContext, secrets *secretStore) (pool func() (*x509.CertPool, error), sans []string, ok bool) {
	var inline *tlsv3.CertificateValidationContext
	var sds string
	switch v := common.ValidationContextType.(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		inline = v.ValidationContext
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		sds = v.ValidationContextSdsSecretConfig.Name
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		inline, sds = v.CombinedValidationContext.DefaultValidationContext, v.CombinedValidationContext.GetValidationContextSdsSecretConfig().GetName()
	default:
		return nil, nil, false
	}
	for _, m := range inline.GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.Matcher.GetExact())
	}
	return func() (*x509.CertPool, error) {
		path := inline.GetTrustedCa().GetFilename()
		if sds != "" {
			sec, err := secrets.get(sds)
			if err != nil {
				return nil, err
			}
			path = sec.GetValidationContext().GetTrustedCa().GetFilename()
		}
		pemData, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("%s: no CA certificate", path)
		}
		return p, nil
	}, sans, true
}

// upstreamTLS builds the client TLS config of an UpstreamTlsContext (envoy.transport_sockets.tls):
// CA and SAN matchers from the validation context, SNI, client certificate, ALPN.
func upstreamTLS(ts *corev3.TransportSocket, secrets *secretStore) (*tls.Config, error) {
	if ts == nil {
		return nil, nil
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return nil, err
	}
	common := ctx.CommonTlsContext
	cfg := &tls.Config{ServerName: ctx.Sni, NextProtos: common.AlpnProtocols, MinVersion: tls.VersionTLS12}
	if common.GetTlsParams().GetTlsMinimumProtocolVersion() == tlsv3.TlsParameters_TLSv1_3 {
		cfg.MinVersion = tls.VersionTLS13
	}
	cert := certSource(common, secrets)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c, err := cert()
		if c == nil && err == nil {
			return &tls.Certificate{}, nil
		}
		return c, err
	}
	pool, sans, ok := caSource(common, secrets)
	if !ok {
		return nil, errors.New("upstream TLS without a validation context: skewgate always verifies")
	}
	// Envoy verifies the chain against trusted_ca and the SAN only against
	// match_typed_subject_alt_names (not against SNI); Go verifies against ServerName, so verify
	// the chain ourselves and then every listed SAN.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		roots, err := pool()
		if err != nil {
			return err
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no server certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
			return err
		}
		if len(sans) == 0 {
			return nil
		}
		for _, s := range sans {
			if leaf.VerifyHostname(s) == nil {
				return nil
			}
		}
		return fmt.Errorf("certificate SANs %v %v match none of %v", leaf.DNSNames, leaf.IPAddresses, sans)
	}
	return cfg, nil
}

func isHTTP1(c *clusterv3.Cluster) (bool, error) {
	a, ok := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		return true, nil // Envoy's default upstream protocol is HTTP/1.1
	}
	var o httpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		return false, err
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil, nil
}

func newCluster(c *clusterv3.Cluster, old *cluster, secrets *secretStore) (*cluster, error) {
	addrs, err := hostAddresses(c)
	if err != nil {
		return nil, err
	}
	h1, err := isHTTP1(c)
	if err != nil {
		return nil, err
	}
	tc, err := upstreamTLS(c.TransportSocket, secrets)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	cl := &cluster{name: c.Name, http1: h1, tlsConfig: tc}
	if len(c.HealthChecks) > 0 {
		cl.hc = c.HealthChecks[0]
	}
	for _, a := range addrs {
		h := &host{addr: a}
		h.healthy.Store(cl.hc == nil)
		if old != nil {
			// A cluster update keeps the health of hosts it still has (Envoy carries host health
			// across cluster updates for hosts that remain).
			for _, oh := range old.hosts {
				if oh.addr == a {
					h.healthy.Store(oh.healthy.Load())
				}
			}
		}
		cl.hosts = append(cl.hosts, h)
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		DialContext:         (&net.Dialer{Timeout: durationOr(c.ConnectTimeout.AsDuration(), 5*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     time.Hour,
	}
	p := new(http.Protocols)
	if h1 {
		p.SetHTTP1(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = p
	cl.transport = tr
	return cl, nil
}

func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// start runs active health checks: GET path with Host set, healthy on 200, unhealthy after
// unhealthy_threshold failures, healthy again after healthy_threshold successes
// (config/core/v3 HealthCheck; no_traffic_interval equals interval in skewgate's config).
func (c *cluster) start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	if c.hc == nil {
		return
	}
	hh := c.hc.GetHttpHealthCheck()
	interval := durationOr(c.hc.Interval.AsDuration(), time.Second)
	timeout := durationOr(c.hc.Timeout.AsDuration(), time.Second)
	unhealthy := int(c.hc.GetUnhealthyThreshold().GetValue())
	client := &http.Client{Transport: c.transport, Timeout: timeout}
	for _, h := range c.hosts {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+h.addr+hh.Path, nil)
				req.Host = hh.Host
				for _, o := range hh.RequestHeadersToAdd {
					setHeader(req.Header, o.Header.Key, o.Header.Value, o.AppendAction)
				}
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if resp != nil {
					resp.Body.Close()
				}
				if ok {
					h.failures = 0
					h.healthy.Store(true)
				} else if h.failures++; h.failures >= unhealthy || !h.healthy.Load() {
					h.healthy.Store(false)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
}

func (c *cluster) stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.transport.CloseIdleConnections()
}

// pick chooses the healthy host with the fewest active requests, skipping tried ones. With
// healthy_panic_threshold 0 an unhealthy host is never chosen (arch_overview/upstream/load_balancing/panic_threshold).
func (c *cluster) pick(tried map[*host]bool) *host {
	var best *host
	for _, h := range c.hosts {
		if !h.healthy.Load() || tried[h] {
			continue
		}
		if best == nil || h.active.Load() < best.active.Load() {
			best = h
		}
	}
	return best
}

// clusters is the cluster manager: the clusters of the last accepted CDS response.
type clusters struct {
	mu sync.RWMutex
	m  map[string]*cluster
}

func (cs *clusters) get(name string) *cluster {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	return cs.m[name]
}
