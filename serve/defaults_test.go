package serve

import (
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds"
)

// TestOptionsAgreeWithTheParts: the leaf options package holds its own copy of discovery's upstream
// cap (it imports no runtime package); it is discovery's own, so Options built in code and by flags
// behave alike. (The Envoy defaults need no such check: xds.Options is options.Envoy.)
func TestOptionsAgreeWithTheParts(t *testing.T) {
	if options.DefaultMaxUpstreams != discovery.DefaultMaxUpstreams {
		t.Errorf("--max-upstreams defaults to %d, discovery to %d", options.DefaultMaxUpstreams, discovery.DefaultMaxUpstreams)
	}
}

// TestValidOptionsPassXDS: Options that pass options.Validate pass the check xds.New and
// xds.Translate apply to Options built in code.
func TestValidOptionsPassXDS(t *testing.T) {
	o := options.NewOptions()
	o.Kubeconfig = "/etc/skewgate/kubeconfig"
	o.Envoy.ServingCertFile, o.Envoy.ServingKeyFile = "/pki/front.crt", "/pki/front.key"
	o.Envoy.UpstreamCAFile, o.Envoy.FrontProxyCertFile, o.Envoy.FrontProxyKeyFile = "/pki/ca.crt", "/pki/fp.crt", "/pki/fp.key"
	o.Complete()
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, err := xds.Translate(discovery.Build("empty", time.Unix(0, 0), nil), o.Envoy); err != nil {
		t.Errorf("valid serve options refused by xds: %v", err)
	}
}
