package options

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/skewgate/skewgate/internal/grpcutil"
)

// InCluster reports whether this process runs in a pod (the in-cluster config applies).
func InCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// Bounds of the duration flags. Each error names the flag and the value.
const (
	// Apiservers renew their identity Lease every 10s and set leaseDurationSeconds 3600: below two
	// renewals one late renewal would drop a live apiserver, and past an hour the Lease itself expires.
	minStaleAfter, maxStaleAfter = 20 * time.Second, time.Hour
	// Envoy accepts an ext_proc message_timeout from 0 to 3600s (validate rules of message_timeout in
	// api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto; the same bounds in the validator
	// go-control-plane generates for v1.40.0). 0 fires at once, so every request would fail open; past
	// 10s a hung ext_proc holds every request that long before the default route.
	minExtProcTimeout, maxExtProcTimeout = time.Millisecond, 10 * time.Second
	// Envoy requires a health check interval above 0 (api/envoy/config/core/v3/health_check.proto);
	// below 100ms every Envoy probes every apiserver 10 times a second per cluster.
	minHealthCheck, maxHealthCheck = 100 * time.Millisecond, time.Minute
)

// Validate reports every problem with the options; each error names the flag and its value.
func (o *Options) Validate() []error {
	var errs []error
	bad := func(flag string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s=%v: %s", flag, value, fmt.Sprintf(format, args...)))
	}
	within := func(flag string, v, lo, hi time.Duration) {
		if v < lo || v > hi {
			bad(flag, v, "must be from %v to %v", lo, hi)
		}
	}

	// Discovery.
	o.static = nil
	for _, s := range o.StaticUpstreams {
		u, err := ParseStaticUpstream(s)
		if err != nil {
			bad("--static-upstream", s, "%v", err)
			continue
		}
		o.static = append(o.static, u)
	}
	if o.MaxUpstreams < 1 || o.MaxUpstreams > 1000 {
		bad("--max-upstreams", o.MaxUpstreams, "must be from 1 to 1000")
	} else if len(o.static) > o.MaxUpstreams {
		bad("--max-upstreams", o.MaxUpstreams, "less than the %d --static-upstream", len(o.static))
	}
	o.cidrs = nil
	for _, c := range o.AllowedCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			bad("--allowed-cidr", c, "not a CIDR")
			continue
		}
		o.cidrs = append(o.cidrs, p.Masked())
	}
	within("--lease-stale-after", o.StaleAfter, minStaleAfter, maxStaleAfter)
	within("--probe-interval", o.ProbeInterval, minHealthCheck, time.Minute)
	if o.StaleAfter <= o.ProbeInterval {
		bad("--lease-stale-after", o.StaleAfter, "must be more than --probe-interval=%v", o.ProbeInterval)
	}
	within("--poll-interval", o.PollInterval, time.Second, time.Hour)
	if o.Kubeconfig == "" && !InCluster() {
		errs = append(errs, errors.New("--kubeconfig is required outside a cluster: skewgate reads identity Leases and each apiserver's discovery with it"))
	}

	errs = append(errs, o.validateKubernetesEndpoints()...)

	// This process.
	grpcFlags := [3]string{"--grpc-cert-file", "--grpc-key-file", "--grpc-client-ca-file"}
	mtls, trioErrs := trio(grpcFlags, [3]string{o.GRPCCertFile, o.GRPCKeyFile, o.GRPCClientCAFile})
	errs = append(errs, trioErrs...)
	errs = append(errs, endpoint("--xds-listen", o.XDSListen, mtls, o.GRPCPlaintextLoopback, strings.Join(grpcFlags[:], ", "))...)
	errs = append(errs, endpoint("--extproc-listen", o.ExtProcListen, mtls, o.GRPCPlaintextLoopback, strings.Join(grpcFlags[:], ", "))...)
	for _, u := range o.GRPCPeerUIDs {
		if u >= math.MaxUint32 { // uid_t is 32 bits and (uid_t)-1 means "no uid"
			bad("--grpc-peer-uid", u, "not a uid: want 0 to %d", uint32(math.MaxUint32-1))
		}
	}
	httpLocal, err := grpcutil.IsLocal(o.HTTPListen)
	if strings.HasPrefix(o.HTTPListen, "unix://") || err != nil {
		bad("--http-listen", o.HTTPListen, "want host:port (probes and `skewgate topology` speak TCP)")
	} else if o.Pprof && !httpLocal {
		bad("--pprof", true, "needs --http-listen on loopback, not --http-listen=%s: profiles and heap dumps expose memory contents", o.HTTPListen)
	}
	if o.XDSListen == o.ExtProcListen || o.XDSListen == o.HTTPListen || o.ExtProcListen == o.HTTPListen {
		errs = append(errs, fmt.Errorf("--xds-listen=%s, --extproc-listen=%s and --http-listen=%s must differ", o.XDSListen, o.ExtProcListen, o.HTTPListen))
	}
	within("--cluster-grace", o.Grace, 0, 24*time.Hour)
	if o.LogFormat != "json" && o.LogFormat != "console" {
		bad("--log-format", o.LogFormat, "want json or console")
	}
	if _, err := zap.ParseAtomicLevel(o.LogLevel); err != nil || o.LogLevel == "" {
		bad("--log-level", o.LogLevel, "want debug, info, warn or error")
	}

	// What xds.New checks again: these rules cover it (serve's tests check that they agree).
	return append(errs, o.validateEnvoy()...)
}

// validateEnvoy checks what Envoy is told.
func (o *Options) validateEnvoy() []error {
	e := &o.Envoy
	var errs []error
	bad := func(flag string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s=%v: %s", flag, value, fmt.Sprintf(format, args...)))
	}
	if net.ParseIP(e.ListenAddress) == nil {
		bad("--front-address", e.ListenAddress, "not an IP address")
	}
	if e.ListenPort < 1 || e.ListenPort > 65535 {
		bad("--front-port", e.ListenPort, "must be from 1 to 65535")
	}
	files := []struct {
		flag, value string
		required    bool
	}{
		{"--front-cert-file", e.ServingCertFile, true}, {"--front-key-file", e.ServingKeyFile, true},
		{"--front-client-ca-file", e.ClientCAFile, false}, {"--envoy-upstream-ca-file", e.UpstreamCAFile, true},
		{"--front-proxy-cert-file", e.FrontProxyCertFile, true}, {"--front-proxy-key-file", e.FrontProxyKeyFile, true},
		{"--envoy-extproc-ca-file", e.ExtProcCAFile, false}, {"--envoy-extproc-cert-file", e.ExtProcCertFile, false},
		{"--envoy-extproc-key-file", e.ExtProcKeyFile, false},
	}
	for _, f := range files {
		switch {
		case f.value == "" && f.required:
			errs = append(errs, fmt.Errorf("%s is required", f.flag))
		case f.value != "" && !filepath.IsAbs(f.value):
			bad(f.flag, f.value, "must be an absolute path: Envoy resolves it, not skewgate")
		}
	}
	// One watched directory per secret (xds/secrets.go): a key elsewhere would not be reloaded with it.
	for _, p := range [][4]string{
		{"--front-key-file", e.ServingKeyFile, "--front-cert-file", e.ServingCertFile},
		{"--front-proxy-key-file", e.FrontProxyKeyFile, "--front-proxy-cert-file", e.FrontProxyCertFile},
		{"--envoy-extproc-key-file", e.ExtProcKeyFile, "--envoy-extproc-cert-file", e.ExtProcCertFile},
	} {
		if p[1] != "" && p[3] != "" && filepath.Dir(p[1]) != filepath.Dir(p[3]) {
			bad(p[0], p[1], "must be in the same directory as %s=%s: Envoy reloads them on a move into one watched directory", p[2], p[3])
		}
	}
	extFlags := [3]string{"--envoy-extproc-ca-file", "--envoy-extproc-cert-file", "--envoy-extproc-key-file"}
	mtls, trioErrs := trio(extFlags, [3]string{e.ExtProcCAFile, e.ExtProcCertFile, e.ExtProcKeyFile})
	errs = append(errs, trioErrs...)
	errs = append(errs, endpoint("--envoy-extproc-address", e.ExtProcAddress, mtls, o.GRPCPlaintextLoopback, strings.Join(extFlags[:], ", "))...)
	if e.ExtProcSNI != "" && len(validation.IsDNS1123Subdomain(e.ExtProcSNI)) > 0 {
		bad("--envoy-extproc-sni", e.ExtProcSNI, "not a DNS name")
	}
	if e.ExtProcTimeout < minExtProcTimeout || e.ExtProcTimeout > maxExtProcTimeout {
		bad("--extproc-timeout", e.ExtProcTimeout, "must be from %v to %v", minExtProcTimeout, maxExtProcTimeout)
	}
	if e.HealthCheckInterval < minHealthCheck || e.HealthCheckInterval > maxHealthCheck {
		bad("--health-check-interval", e.HealthCheckInterval, "must be from %v to %v", minHealthCheck, maxHealthCheck)
	}
	return errs
}

// endpoint checks a gRPC address between Envoy and skewgate: unix:///absolute/path, or host:port with
// mTLS, or, with --grpc-plaintext-loopback only, a plaintext loopback host:port. Plaintext on
// loopback TCP lets any local user or host-network pod talk to skewgate as Envoy (and, by binding the
// port first, to Envoy as skewgate); a unix socket names its peer (internal/grpcutil/peer.go).
func endpoint(flag, addr string, mtls, plaintextLoopback bool, files string) []error {
	local, err := grpcutil.IsLocal(addr)
	switch {
	case addr == "":
		return []error{fmt.Errorf("%s is required", flag)}
	case err != nil:
		return []error{fmt.Errorf("%s=%s: %v", flag, addr, err)}
	case mtls || strings.HasPrefix(addr, "unix://"):
		return nil
	case !local:
		return []error{fmt.Errorf("%s=%s: not loopback or a unix socket, and plaintext gRPC is only allowed on the same host: give %s", flag, addr, files)}
	case !plaintextLoopback:
		return []error{fmt.Errorf("%s=%s: plaintext gRPC on loopback TCP is open to every local user and host-network pod: use a unix socket (unix:///path), or give %s; %s allows it for development and tests", flag, addr, files, grpcutil.PlaintextLoopbackFlag)}
	}
	return nil
}

// trio checks mTLS files that go together: all or none. It reports whether all are given.
func trio(flags, values [3]string) (bool, []error) {
	var given, missing []string
	for i, v := range values {
		if v != "" {
			given = append(given, flags[i]+"="+v)
		} else {
			missing = append(missing, flags[i])
		}
	}
	if len(given) == 0 || len(missing) == 0 {
		return len(missing) == 0, nil
	}
	return false, []error{fmt.Errorf("%s given without %s: mTLS needs all of %s, or none",
		strings.Join(given, ", "), strings.Join(missing, " and "), strings.Join(flags[:], ", "))}
}

// hostname is the default member name: the lowercase host name (a Lease name is a DNS subdomain).
func hostname() string {
	h, _ := os.Hostname()
	return strings.ToLower(h)
}

// Bounds of --kubernetes-endpoints-ttl: the apiserver's own reconciler uses 15s; below 5s a renewal
// every 1.7s per member; past 5m a dead front stays published that long.
const minKubeTTL, maxKubeTTL = 5 * time.Second, 5 * time.Minute

// validateKubernetesEndpoints checks the kubernetes Service flags and sets kubeEndpoint.
func (o *Options) validateKubernetesEndpoints() []error {
	var errs []error
	if o.KubernetesEndpointsTTL < minKubeTTL || o.KubernetesEndpointsTTL > maxKubeTTL {
		errs = append(errs, fmt.Errorf("--kubernetes-endpoints-ttl=%v: must be from %v to %v", o.KubernetesEndpointsTTL, minKubeTTL, maxKubeTTL))
	}
	if m := o.KubernetesEndpointsMember; m != "" && len(validation.IsDNS1123Subdomain(m)) > 0 {
		errs = append(errs, fmt.Errorf("--kubernetes-endpoints-member=%s: not a Lease name (a lowercase DNS subdomain)", m))
	} else if m == "" && o.KubernetesEndpoints {
		errs = append(errs, errors.New("--kubernetes-endpoints needs --kubernetes-endpoints-member (the host name is empty)"))
	}
	addr, flag := o.KubernetesEndpointAddress, "--kubernetes-endpoint-address"
	if addr == "" {
		if !o.KubernetesEndpoints {
			return errs
		}
		addr, flag = o.Envoy.ListenAddress, "--front-address"
	}
	ip, err := netip.ParseAddr(addr)
	switch {
	case err != nil || !ip.Is4():
		errs = append(errs, fmt.Errorf("%s=%s: not an IPv4 address (the kubernetes EndpointSlice is IPv4)", flag, addr))
	case ip.IsUnspecified() && flag == "--front-address":
		errs = append(errs, fmt.Errorf("--kubernetes-endpoints needs --kubernetes-endpoint-address: --front-address=%s is no address a client can reach", addr))
	case ip.IsUnspecified() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast():
		errs = append(errs, fmt.Errorf("%s=%s: the apiserver refuses unspecified, loopback, link-local and multicast endpoints", flag, addr))
	default:
		o.kubeEndpoint = netip.AddrPortFrom(ip, uint16(o.Envoy.ListenPort))
	}
	return errs
}
