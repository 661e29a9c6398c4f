package xds

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/skewgate/skewgate/internal/grpcutil"
)

// Options is what the translation needs besides the Topology: where Envoy listens, and the
// certificate files as Envoy sees them (paths on the Envoy host, which Envoy reads itself; the private
// keys never travel over xDS).
type Options struct {
	// ListenAddress and ListenPort are the front's HTTPS address. Defaults: 0.0.0.0 and 6443.
	ListenAddress string
	ListenPort    uint32
	// ServingCertFile and ServingKeyFile are the front's serving certificate: one the cluster's
	// clients already trust for the address they use. Required.
	ServingCertFile, ServingKeyFile string
	// ClientCAFile, when set, makes the front request client certificates and verify them against it
	// (the apiserver's --client-ca-file). Unset: client certificates are not requested.
	ClientCAFile string

	// UpstreamCAFile verifies every apiserver serving certificate (for wire.UpstreamSNI). Required.
	UpstreamCAFile string
	// FrontProxyCertFile and FrontProxyKeyFile are the client certificate signed by the apiservers'
	// --requestheader-client-ca-file, so they accept the identity headers the front sets. Required.
	FrontProxyCertFile, FrontProxyKeyFile string

	// ExtProcAddress is the ext_proc service, host:port or unix:///path. Required.
	ExtProcAddress string
	// ExtProcCAFile, ExtProcCertFile and ExtProcKeyFile turn on mTLS to the ext_proc service. All or
	// none; without them the address must be a unix socket or loopback.
	ExtProcCAFile, ExtProcCertFile, ExtProcKeyFile string
	// ExtProcSNI is the server name verified on the ext_proc certificate. Default: the host of
	// ExtProcAddress.
	ExtProcSNI string
	// ExtProcTimeout bounds each ext_proc exchange; after it Envoy routes by the default route
	// (failure_mode_allow). Default 500ms. The service answers in well under a millisecond, but a
	// request that times out takes the default route and may meet an apiserver that lacks its
	// resource (a wrong 404): a generous timeout only costs time when the processor hangs while
	// connected, whereas a dead processor fails open at once (connection refused). A 100 ms timeout
	// produced one wrong 404 in 600 kubectl calls on 2 saturated cores under -race.
	ExtProcTimeout time.Duration

	// HealthCheckInterval is how often Envoy probes each apiserver's /readyz. Default 1s.
	HealthCheckInterval time.Duration

	// ForwardCertificateUID says every apiserver reads X-Remote-Uid (--requestheader-uid-headers):
	// the identity filter then forwards a client certificate's UID attribute. Without it a
	// certificate with a UID is refused (503): an apiserver without that flag would drop the UID
	// silently, and kubeadm does not set it.
	ForwardCertificateUID bool
}

// WithDefaults returns o with unset fields defaulted.
func (o Options) WithDefaults() Options {
	if o.ListenAddress == "" {
		o.ListenAddress = "0.0.0.0"
	}
	if o.ListenPort == 0 {
		o.ListenPort = 6443
	}
	if o.ExtProcTimeout == 0 {
		o.ExtProcTimeout = 500 * time.Millisecond
	}
	if o.HealthCheckInterval == 0 {
		o.HealthCheckInterval = time.Second
	}
	return o
}

// Validate reports every problem with o (after WithDefaults).
func (o Options) Validate() error {
	var errs []error
	required := func(v, flag string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", flag))
		}
	}
	required(o.ServingCertFile, "serving certificate file")
	required(o.ServingKeyFile, "serving key file")
	required(o.UpstreamCAFile, "upstream CA file")
	required(o.FrontProxyCertFile, "front-proxy client certificate file")
	required(o.FrontProxyKeyFile, "front-proxy client key file")
	// One watched directory per secret (secrets.go): a key outside its certificate's directory would
	// not be reloaded with it.
	for _, p := range [][3]string{
		{"serving", o.ServingCertFile, o.ServingKeyFile},
		{"front-proxy client", o.FrontProxyCertFile, o.FrontProxyKeyFile},
		{"ext_proc client", o.ExtProcCertFile, o.ExtProcKeyFile},
	} {
		if p[1] != "" && p[2] != "" && filepath.Dir(p[1]) != filepath.Dir(p[2]) {
			errs = append(errs, fmt.Errorf("the %s certificate %q and its key %q must be in the same directory: Envoy reloads them on a move into one watched directory", p[0], p[1], p[2]))
		}
	}
	for _, f := range []string{o.ServingCertFile, o.ServingKeyFile, o.ClientCAFile, o.UpstreamCAFile, o.FrontProxyCertFile, o.FrontProxyKeyFile, o.ExtProcCAFile, o.ExtProcCertFile, o.ExtProcKeyFile} {
		if f != "" && !filepath.IsAbs(f) {
			errs = append(errs, fmt.Errorf("certificate file %q must be an absolute path: Envoy resolves it, not skewgate", f))
		}
	}
	if net.ParseIP(o.ListenAddress) == nil {
		errs = append(errs, fmt.Errorf("listen address %q is not an IP address", o.ListenAddress))
	}
	errs = append(errs, grpcutil.CheckEndpoint("ext_proc address", o.ExtProcAddress, "the ext_proc CA, certificate and key files", o.ExtProcCAFile, o.ExtProcCertFile, o.ExtProcKeyFile)...)
	if o.ExtProcTimeout < time.Millisecond || o.ExtProcTimeout > 10*time.Second {
		errs = append(errs, fmt.Errorf("ext_proc timeout %v out of range [1ms, 10s]", o.ExtProcTimeout))
	}
	if o.HealthCheckInterval < 100*time.Millisecond || o.HealthCheckInterval > time.Minute {
		errs = append(errs, fmt.Errorf("health check interval %v out of range [100ms, 1m]", o.HealthCheckInterval))
	}
	return errors.Join(errs...)
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("want host:port")
	}
	return host, uint32(p), nil
}
