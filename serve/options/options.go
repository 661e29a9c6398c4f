// Package options holds what `skewgate serve` can be told: the Options, their flags and their
// validation. It is a leaf: it imports no runtime package (discovery, xds, extproc, serve), so
// `skewgate kubeadm install` validates the serve flags it renders without linking the control plane.
// serve converts the plain values here into each part's own configuration.
package options

import (
	"net/netip"
	"time"

	"github.com/spf13/pflag"
)

// Options is everything `skewgate serve` can be told.
type Options struct {
	// Discovery.
	Kubeconfig         string
	UpstreamCAFile     string
	StaticUpstreams    []string
	AllowedCIDRs       []string
	TrustEndpointSlice bool
	StaleAfter         time.Duration
	ProbeInterval      time.Duration
	PollInterval       time.Duration
	MaxUpstreams       int

	// The default/kubernetes Service's endpoints (package kubesvc): off unless asked for.
	KubernetesEndpoints bool
	// KubernetesEndpointAddress is this node's front IP as clients reach it (default: --front-address
	// when that is one IPv4 address); the port is --front-port.
	KubernetesEndpointAddress string
	KubernetesEndpointsTTL    time.Duration
	// KubernetesEndpointsMember names this node's member Lease (default: the lowercase host name).
	KubernetesEndpointsMember string

	// Listeners of this process: host:port or unix:///path.
	XDSListen, ExtProcListen, HTTPListen string
	// GRPCCertFile, GRPCKeyFile and GRPCClientCAFile secure both gRPC listeners with mTLS; required
	// on TCP unless GRPCPlaintextLoopback (loopback only, for development and tests).
	GRPCCertFile, GRPCKeyFile, GRPCClientCAFile string
	// GRPCPeerUIDs may connect to the gRPC unix sockets besides skewgate's own effective uid.
	GRPCPeerUIDs          []uint
	GRPCPlaintextLoopback bool
	Grace                 time.Duration

	// What Envoy is told (paths on the Envoy host).
	Envoy Envoy

	LogFormat, LogLevel string
	Pprof               bool

	// fromFlags is set by AddFlags: every field then holds a value the operator gave or a default
	// from NewOptions, and a zero is refused, not replaced.
	fromFlags bool
	// Parsed by Validate.
	static       []StaticUpstream
	cidrs        []netip.Prefix
	kubeEndpoint netip.AddrPort
}

// KubernetesEndpoint is this node's endpoint of the kubernetes Service (set by Validate with
// --kubernetes-endpoints).
func (o *Options) KubernetesEndpoint() netip.AddrPort { return o.kubeEndpoint }

// Static is the parsed --static-upstream list (set by Validate).
func (o *Options) Static() []StaticUpstream { return o.static }

// CIDRs is the parsed --allowed-cidr list (set by Validate).
func (o *Options) CIDRs() []netip.Prefix { return o.cidrs }

// DefaultMaxUpstreams is --max-upstreams' default. A control plane runs 3 to 5 apiservers, twice
// that during a surge upgrade; 64 leaves ample room while bounding what forged Leases can cost: one
// worker probing every --probe-interval per upstream, and in every Envoy two clusters (HTTP/2 and
// HTTP/1.1) per upstream, each health-checked every second.
const DefaultMaxUpstreams = 64

// The gRPC listeners by default: unix sockets in the directory `skewgate kubeadm install` creates
// root-only, where the kernel names each peer's uid (internal/grpcutil/peer.go).
const (
	DefaultXDSListen     = "unix:///var/lib/skewgate/xds.sock"
	DefaultExtProcListen = "unix:///var/lib/skewgate/extproc.sock"
)

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		TrustEndpointSlice:        true,
		StaleAfter:                30 * time.Second,
		ProbeInterval:             2 * time.Second,
		PollInterval:              30 * time.Second,
		MaxUpstreams:              DefaultMaxUpstreams,
		KubernetesEndpointsTTL:    15 * time.Second,
		KubernetesEndpointsMember: hostname(),
		XDSListen:                 DefaultXDSListen,
		ExtProcListen:             DefaultExtProcListen,
		HTTPListen:                "127.0.0.1:18080",
		Grace:                     time.Minute,
		LogFormat:                 "json",
		LogLevel:                  "info",
		Envoy:                     Envoy{}.WithDefaults(),
	}
}

// AddFlags registers the flags of `skewgate serve`.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.fromFlags = true
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig for reading identity Leases and fetching each apiserver's discovery (empty: in-cluster config)")
	fs.StringVar(&o.UpstreamCAFile, "upstream-ca-file", o.UpstreamCAFile, "CA that signs the apiservers' serving certificates, verified for kubernetes.default.svc (empty: the kubeconfig's CA)")
	fs.StringArrayVar(&o.StaticUpstreams, "static-upstream", o.StaticUpstreams, "an apiserver as name=host:port, name being its hostname (repeatable); matched to its identity Lease by hostname")
	fs.StringArrayVar(&o.AllowedCIDRs, "allowed-cidr", o.AllowedCIDRs, "CIDR that identity Lease addresses may be in (repeatable); other Lease addresses are never routed to")
	fs.BoolVar(&o.TrustEndpointSlice, "trust-endpointslice", o.TrustEndpointSlice, "also accept Lease addresses listed in the default/kubernetes EndpointSlice; besides these, --allowed-cidr and --static-upstream, no address is accepted (no default range, loopback included)")
	fs.DurationVar(&o.StaleAfter, "lease-stale-after", o.StaleAfter, "an identity Lease not renewed for this long means its apiserver is gone; 20s to 1h (apiservers renew every 10s), and more than --probe-interval")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval, "how often each apiserver's /readyz is probed; 100ms to 1m")
	fs.IntVar(&o.MaxUpstreams, "max-upstreams", o.MaxUpstreams, "most upstream apiservers (static ones included), 1 to 1000; identity Leases past it are refused, logged and counted in skewgate_discovery_ignored_leases")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "how often each apiserver's discovery is refetched (CRD and APIService changes refetch at once); 1s to 1h")

	fs.BoolVar(&o.KubernetesEndpoints, "kubernetes-endpoints", o.KubernetesEndpoints, "own the default/kubernetes Endpoints and EndpointSlice: publish the live fronts (else the ready apiservers) so in-cluster clients reach the fronts; needs the apiservers on --endpoint-reconciler-type=none and the RBAC of `skewgate kubeadm rbac --kubernetes-endpoints` (docs/kubernetes-service.md)")
	fs.StringVar(&o.KubernetesEndpointAddress, "kubernetes-endpoint-address", o.KubernetesEndpointAddress, "this node's front IPv4 address as clients reach it, published with --front-port (default: --front-address when it is one address; required when it is 0.0.0.0)")
	fs.DurationVar(&o.KubernetesEndpointsTTL, "kubernetes-endpoints-ttl", o.KubernetesEndpointsTTL, "this member's Lease duration, renewed every third of it while discovery has a ready apiserver and the front answers; 5s to 5m")
	fs.StringVar(&o.KubernetesEndpointsMember, "kubernetes-endpoints-member", o.KubernetesEndpointsMember, "name of this node's member Lease in namespace skewgate (default: the lowercase host name)")

	fs.StringVar(&o.XDSListen, "xds-listen", o.XDSListen, "xDS (ADS) gRPC listen address, unix:///path (its directory is created 0700 if missing) or host:port with mTLS")
	fs.StringVar(&o.ExtProcListen, "extproc-listen", o.ExtProcListen, "ext_proc gRPC listen address, unix:///path (its directory is created 0700 if missing) or host:port with mTLS")
	fs.UintSliceVar(&o.GRPCPeerUIDs, "grpc-peer-uid", o.GRPCPeerUIDs, "uid that may connect to the gRPC unix sockets besides skewgate's own (repeatable; e.g. Envoy's when it runs as another user; root is not implied)")
	fs.BoolVar(&o.GRPCPlaintextLoopback, "grpc-plaintext-loopback", o.GRPCPlaintextLoopback, "accept plaintext gRPC on loopback TCP, for development and tests only: every local user and host-network pod can reach it")
	fs.StringVar(&o.HTTPListen, "http-listen", o.HTTPListen, "HTTP listen address (host:port) for /healthz, /readyz, /metrics and /topology; loopback by default")
	fs.StringVar(&o.GRPCCertFile, "grpc-cert-file", o.GRPCCertFile, "serving certificate of the gRPC listeners (mTLS; required on TCP unless --grpc-plaintext-loopback); it and --grpc-client-ca-file are re-read every 10s, a failed reload is logged and counted and the last good one stays")
	fs.StringVar(&o.GRPCKeyFile, "grpc-key-file", o.GRPCKeyFile, "key of --grpc-cert-file")
	fs.StringVar(&o.GRPCClientCAFile, "grpc-client-ca-file", o.GRPCClientCAFile, "CA that Envoy's client certificate must chain to")
	fs.DurationVar(&o.Grace, "cluster-grace", o.Grace, "how long a cluster that left the Topology stays in Envoy; 0 to 24h")

	e := &o.Envoy
	fs.StringVar(&e.ListenAddress, "front-address", e.ListenAddress, "IP the Envoy front listens on")
	fs.Uint32Var(&e.ListenPort, "front-port", e.ListenPort, "port the Envoy front listens on, 1 to 65535")
	fs.StringVar(&e.ServingCertFile, "front-cert-file", e.ServingCertFile, "Envoy: the front's serving certificate (one clients trust for the front's address)")
	fs.StringVar(&e.ServingKeyFile, "front-key-file", e.ServingKeyFile, "Envoy: key of --front-cert-file")
	fs.StringVar(&e.ClientCAFile, "front-client-ca-file", e.ClientCAFile, "Envoy: CA verifying client certificates (the apiservers' --client-ca-file); empty: certificates are not requested")
	fs.StringVar(&e.UpstreamCAFile, "envoy-upstream-ca-file", e.UpstreamCAFile, "Envoy: CA verifying apiserver certificates for kubernetes.default.svc")
	fs.StringVar(&e.FrontProxyCertFile, "front-proxy-cert-file", e.FrontProxyCertFile, "Envoy: client certificate signed by the apiservers' --requestheader-client-ca-file")
	fs.StringVar(&e.FrontProxyKeyFile, "front-proxy-key-file", e.FrontProxyKeyFile, "Envoy: key of --front-proxy-cert-file")
	fs.StringVar(&e.ExtProcAddress, "envoy-extproc-address", e.ExtProcAddress, "Envoy: where it reaches the ext_proc service (default: --extproc-listen)")
	fs.StringVar(&e.ExtProcCAFile, "envoy-extproc-ca-file", e.ExtProcCAFile, "Envoy: CA verifying the ext_proc service certificate (mTLS)")
	fs.StringVar(&e.ExtProcCertFile, "envoy-extproc-cert-file", e.ExtProcCertFile, "Envoy: client certificate for the ext_proc service")
	fs.StringVar(&e.ExtProcKeyFile, "envoy-extproc-key-file", e.ExtProcKeyFile, "Envoy: key of --envoy-extproc-cert-file")
	fs.StringVar(&e.ExtProcSNI, "envoy-extproc-sni", e.ExtProcSNI, "Envoy: server name verified on the ext_proc certificate (default: its host)")
	fs.DurationVar(&e.ExtProcTimeout, "extproc-timeout", e.ExtProcTimeout, "Envoy: how long it waits for ext_proc before taking the default route; 1ms to 10s")
	fs.BoolVar(&e.ForwardCertificateUID, "forward-certificate-uid", e.ForwardCertificateUID, "Envoy: forward a client certificate's UID attribute as X-Remote-Uid; set it only when every apiserver runs --requestheader-uid-headers=X-Remote-Uid (kubeadm does not set it). Without it a certificate with a UID is refused (503), never sent on without its UID")
	fs.DurationVar(&e.HealthCheckInterval, "health-check-interval", e.HealthCheckInterval, "Envoy: /readyz health check interval per apiserver; 100ms to 1m")

	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "json or console")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve /debug/pprof on --http-listen, which must then be loopback (refused otherwise: profiles expose memory contents)")
}

// Complete fills derived values. Options built in code (not by AddFlags) get Envoy.WithDefaults for the
// Envoy fields they left zero; flag values are validated as given.
func (o *Options) Complete() {
	if o.Envoy.ExtProcAddress == "" {
		o.Envoy.ExtProcAddress = o.ExtProcListen
	}
	if !o.fromFlags {
		o.Envoy = o.Envoy.WithDefaults()
	}
}
