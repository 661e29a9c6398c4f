package options

import "time"

// Envoy is what Envoy is told, as plain values: the fields of xds.Options, one for one, so that serve
// converts it with xds.Options(o.Envoy) (a field added to one and not the other stops that
// conversion from compiling). Paths are on the Envoy host; Envoy reads the files itself.
type Envoy struct {
	// ListenAddress and ListenPort are the front's HTTPS address (--front-address, --front-port).
	ListenAddress string
	ListenPort    uint32
	// The front's serving certificate and the CA verifying client certificates (empty: none requested).
	ServingCertFile, ServingKeyFile string
	ClientCAFile                    string

	// UpstreamCAFile verifies every apiserver's serving certificate; the front-proxy client
	// certificate makes the apiservers accept the identity headers.
	UpstreamCAFile                        string
	FrontProxyCertFile, FrontProxyKeyFile string

	// Where Envoy reaches ext_proc, and mTLS to it (all three files or none).
	ExtProcAddress                                 string
	ExtProcCAFile, ExtProcCertFile, ExtProcKeyFile string
	ExtProcSNI                                     string
	// ExtProcTimeout bounds each ext_proc exchange, after which Envoy takes its own route table.
	ExtProcTimeout time.Duration

	// HealthCheckInterval is how often Envoy probes each apiserver's /readyz.
	HealthCheckInterval time.Duration

	// ForwardCertificateUID: every apiserver reads X-Remote-Uid, so a certificate's UID is forwarded.
	ForwardCertificateUID bool
}

// withDefaults fills what Options built in code left zero, with the flags' defaults (the same as
// xds.Options.WithDefaults; serve's tests check that they agree).
func (e Envoy) withDefaults() Envoy {
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
