package xds

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/skewgate/skewgate/internal/grpcutil"
	"github.com/skewgate/skewgate/serve/options"
)

// Options is what the translation needs besides the Topology: where Envoy listens, and the
// certificate files as Envoy sees them. It is defined, with its defaults (WithDefaults), in the leaf
// serve/options, which `skewgate kubeadm install` imports without the runtime; serve hands its
// flags' values to xds as they are.
type Options = options.Envoy

// validateOptions reports every problem with o (after WithDefaults): the check for Options built in
// code; serve's flags pass it (options.Options.Validate names the flags).
func validateOptions(o Options) error {
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
