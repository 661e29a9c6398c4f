package serve

import (
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds"
)

// TestOptionsAgreeWithTheParts: the leaf options package holds its own defaults (it imports no
// runtime package); they are the parts' own, so Options built in code and by flags behave alike.
func TestOptionsAgreeWithTheParts(t *testing.T) {
	if options.DefaultMaxUpstreams != discovery.DefaultMaxUpstreams {
		t.Errorf("--max-upstreams defaults to %d, discovery to %d", options.DefaultMaxUpstreams, discovery.DefaultMaxUpstreams)
	}
	o := options.NewOptions()
	o.Complete()
	got := xds.Options(o.Envoy)
	want := xds.Options{ExtProcAddress: o.ExtProcListen}.WithDefaults()
	if got != want {
		t.Errorf("flag defaults for Envoy %+v, xds defaults %+v", got, want)
	}
}

// TestValidOptionsPassXDS: Options that pass options.Validate pass xds.New's own check.
func TestValidOptionsPassXDS(t *testing.T) {
	o := options.NewOptions()
	o.Kubeconfig = "/etc/skewgate/kubeconfig"
	o.Envoy.ServingCertFile, o.Envoy.ServingKeyFile = "/pki/front.crt", "/pki/front.key"
	o.Envoy.UpstreamCAFile, o.Envoy.FrontProxyCertFile, o.Envoy.FrontProxyKeyFile = "/pki/ca.crt", "/pki/fp.crt", "/pki/fp.key"
	o.Complete()
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := xds.Options(o.Envoy).Validate(); err != nil {
		t.Errorf("valid serve options refused by xds: %v", err)
	}
}
