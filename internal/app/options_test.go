package app

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func validOptions(t *testing.T) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{
		"--kubeconfig=/etc/skewgate/kubeconfig",
		"--static-upstream=cp-1=10.0.0.1:6443",
		"--allowed-cidr=10.0.0.0/24",
		"--front-cert-file=/pki/front.crt", "--front-key-file=/pki/front.key",
		"--envoy-upstream-ca-file=/pki/ca.crt",
		"--front-proxy-cert-file=/pki/fp.crt", "--front-proxy-key-file=/pki/fp.key",
	}); err != nil {
		t.Fatal(err)
	}
	o.Complete()
	return o
}

func TestOptionsValidate(t *testing.T) {
	if errs := validOptions(t).Validate(); len(errs) != 0 {
		t.Fatalf("valid options refused: %v", errs)
	}
	for name, c := range map[string]struct {
		mut  func(*Options)
		want string
	}{
		"bad static upstream":       {func(o *Options) { o.StaticUpstreams = []string{"cp-1:6443"} }, "--static-upstream"},
		"bad CIDR":                  {func(o *Options) { o.AllowedCIDRs = []string{"10.0.0.0/33"} }, "--allowed-cidr"},
		"plaintext gRPC off-host":   {func(o *Options) { o.XDSListen = "0.0.0.0:18000" }, "--xds-listen"},
		"half of gRPC TLS":          {func(o *Options) { o.GRPCCertFile = "/x.crt" }, "--grpc-cert-file"},
		"no front certificate":      {func(o *Options) { o.Envoy.ServingCertFile = "" }, "serving certificate"},
		"bad log format":            {func(o *Options) { o.LogFormat = "xml" }, "--log-format"},
		"relative unix socket":      {func(o *Options) { o.ExtProcListen = "unix://run/x.sock" }, "absolute"},
		"no kubeconfig off-cluster": {func(o *Options) { o.Kubeconfig = "" }, "--kubeconfig"},
		"key apart from its cert":   {func(o *Options) { o.Envoy.FrontProxyKeyFile = "/keys/fp.key" }, "same directory"},
	} {
		o := validOptions(t)
		c.mut(o)
		errs := o.Validate()
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		if !strings.Contains(strings.Join(msgs, "\n"), c.want) {
			t.Errorf("%s: errors %q do not mention %q", name, msgs, c.want)
		}
	}
}
