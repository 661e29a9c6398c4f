package xds

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/testbed"
)

// TestLiveEnvoyACKs runs a real Envoy against the real xDS server when ENVOY_BIN is set: every
// resource type must be ACKed and nothing NACKed.
func TestLiveEnvoyACKs(t *testing.T) {
	envoy := os.Getenv("ENVOY_BIN")
	if envoy == "" {
		t.Skip("ENVOY_BIN is not set: no Envoy binary can be installed on this machine, so the live-Envoy ACK test is skipped; set ENVOY_BIN=/path/to/envoy to run it")
	}
	dir := t.TempDir()
	pki, err := testbed.NewPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.IssueServing("front", net.ParseIP("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		ListenAddress: "127.0.0.1", ListenPort: 16443,
		ServingCertFile: serving.Cert, ServingKeyFile: serving.Key, ClientCAFile: pki.CA.Cert,
		UpstreamCAFile: pki.CA.Cert, FrontProxyCertFile: pki.FrontProxyClient.Cert, FrontProxyKeyFile: pki.FrontProxyClient.Key,
		ExtProcAddress: "127.0.0.1:1",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, Config{Options: o, Source: newFakeSource(loadScenario(t, "testdata/three-two-sets.in.yaml")), Logger: zaptest.NewLogger(t), Registry: nil})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ctx, s, lis)
	for _, delta := range []bool{true, false} {
		b, err := Bootstrap(BootstrapOptions{NodeID: "envoy-" + strconv.FormatBool(delta), NodeCluster: "test", XDSAddress: lis.Addr().String(), Delta: delta, AdminAddress: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		y, _ := BootstrapYAML(b)
		path := filepath.Join(dir, "bootstrap-"+strconv.FormatBool(delta)+".yaml")
		os.WriteFile(path, y, 0o644)
		before := testutil.ToFloat64(s.m.acks.WithLabelValues("listener"))
		cmd := exec.CommandContext(ctx, envoy, "-c", path, "--base-id", strconv.Itoa(os.Getpid()%1000+int(time.Now().UnixNano()%1000)), "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "Envoy to ACK the listener", func() bool { return testutil.ToFloat64(s.m.acks.WithLabelValues("listener")) > before })
		for _, typ := range []string{"cluster", "route", "listener"} {
			if n := testutil.ToFloat64(s.m.nacks.WithLabelValues(typ)); n != 0 {
				t.Errorf("Envoy NACKed %s (%v times)", typ, n)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}
