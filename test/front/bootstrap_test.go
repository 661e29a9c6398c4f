package front

import (
	"testing"

	"github.com/skewgate/skewgate/xds/envoyconf"
)

// TestEnvoyBootstrapRenders: the bootstrap a real Envoy front (ENVOY_BIN) starts with passes
// skewgate's own validation, so the Envoy runs of the end-to-end tests can start at all.
func TestEnvoyBootstrapRenders(t *testing.T) {
	dir := t.TempDir()
	b, err := envoyconf.Bootstrap(envoyBootstrap(dir, "unix://"+dir+"/xds.sock", Options{MaxConnections: 8}))
	if err != nil {
		t.Fatalf("the ENVOY_BIN front's bootstrap: %v", err)
	}
	if got := b.GetAdmin().GetAddress().GetPipe().GetPath(); got != dir+"/envoy-admin.sock" {
		t.Errorf("the admin API is on %q, want the front's own socket", got)
	}
}
