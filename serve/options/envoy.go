package options

import "time"

// Envoy is what Envoy is told besides the Topology: where the front listens, and the certificate
// files as Envoy sees them (paths on the Envoy host, which Envoy reads itself; the private keys never
// travel over xDS). It is the one definition: xds.Options is this type, so serve hands o.Envoy to
// xds as it is.
type Envoy struct {
	// ListenAddress and ListenPort are the front's HTTPS address (--front-address, --front-port).
	// Defaults: 0.0.0.0 and 6443.
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

// WithDefaults returns e with unset fields defaulted: the flags' defaults, and what xds applies to
// Options built in code.
func (e Envoy) WithDefaults() Envoy {
	if e.ListenAddress == "" {
		e.ListenAddress = "0.0.0.0"
	}
	if e.ListenPort == 0 {
		e.ListenPort = 6443
	}
	if e.ExtProcTimeout == 0 {
		e.ExtProcTimeout = 500 * time.Millisecond
	}
	if e.HealthCheckInterval == 0 {
		e.HealthCheckInterval = time.Second
	}
	return e
}
