package xds

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/skewgate/skewgate/internal/xdstest"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// The tests in this file run a real Envoy: set ENVOY_BIN to its binary (envoy/README.md lists the
// commands per supported release). Without it they skip and say so.

func envoyBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("ENVOY_BIN")
	if bin == "" {
		t.Skip("ENVOY_BIN is not set: no Envoy binary can be installed on this machine, so this real-Envoy test is skipped; set ENVOY_BIN=/path/to/envoy to run it (envoy/README.md)")
	}
	return bin
}

// envoyPKI writes certificates for every file the translation names and returns Options using them:
// client CA, upstream CA, front-proxy pair and an ext_proc mTLS pair, so every secret is served.
func envoyPKI(t *testing.T) (Options, testPKI) {
	t.Helper()
	pki := newTestPKI(t)
	return Options{
		ListenAddress: "127.0.0.1", ListenPort: freePort(t),
		ServingCertFile: pki.Cert, ServingKeyFile: pki.Key, ClientCAFile: pki.CA,
		UpstreamCAFile: pki.CA, FrontProxyCertFile: pki.Cert, FrontProxyKeyFile: pki.Key,
		// Nothing listens there: the cluster only has to be accepted.
		ExtProcAddress: "127.0.0.1:1", ExtProcSNI: "127.0.0.1",
		ExtProcCAFile: pki.CA, ExtProcCertFile: pki.Cert, ExtProcKeyFile: pki.Key,
	}, pki
}

func freePort(t *testing.T) uint32 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port)
}

func validate(t *testing.T, envoy, path string) {
	t.Helper()
	out, err := exec.Command(envoy, "--mode", "validate", "-c", path, "--log-level", "warn").CombinedOutput()
	if err != nil {
		y, _ := os.ReadFile(path)
		t.Fatalf("envoy --mode validate %s: %v\n%s\n--- config:\n%s", path, err, out, y)
	}
}

// TestEnvoyValidatesBootstrap runs `envoy --mode validate` on the shipped bootstrap's shape (mTLS to
// the xDS server through the SDS files), with certificate and SDS paths that exist here.
func TestEnvoyValidatesBootstrap(t *testing.T) {
	envoy := envoyBin(t)
	_, pki := envoyPKI(t)
	dir := t.TempDir()
	// The example's node and delta ADS (envoyconf's exampleBootstrap), with files that exist here.
	o := envoyconf.BootstrapOptions{
		NodeID: "front-1", NodeCluster: "skewgate-front", Delta: true,
		XDSAddress: "127.0.0.1:18000",
		XDSCAFile:  pki.CA, XDSCertFile: pki.Cert, XDSKeyFile: pki.Key,
		SDSDir: filepath.Join(dir, "sds"),
	}
	files, err := envoyconf.BootstrapSDSFiles(o)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(o.SDSDir, 0o755)
	for name, y := range files {
		os.WriteFile(filepath.Join(o.SDSDir, name), y, 0o644)
	}
	b, err := envoyconf.Bootstrap(o)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := envoyconf.BootstrapYAML(b)
	path := filepath.Join(dir, "bootstrap.yaml")
	os.WriteFile(path, y, 0o644)
	validate(t, envoy, path)
}

// staticSnapshot turns rs into a bootstrap whose static_resources hold every listener, route (inline
// in the connection manager), cluster and secret (SDS references resolve to the static secrets).
func staticSnapshot(t *testing.T, rs *Resources) *bootstrapv3.Bootstrap {
	t.Helper()
	b := &bootstrapv3.Bootstrap{Node: &corev3.Node{Id: "validate", Cluster: "validate"}, StaticResources: &bootstrapv3.Bootstrap_StaticResources{}}
	for _, l := range rs.Listeners {
		b.StaticResources.Listeners = append(b.StaticResources.Listeners, proto.Clone(l).(*listenerv3.Listener))
	}
	for _, c := range rs.Clusters {
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, proto.Clone(c).(*clusterv3.Cluster))
	}
	for _, s := range rs.Secrets {
		b.StaticResources.Secrets = append(b.StaticResources.Secrets, proto.Clone(s).(*tlsv3.Secret))
	}
	routes := 0
	walk(t, b.ProtoReflect(), "Bootstrap", func(_ string, m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *tlsv3.SdsSecretConfig:
			x.SdsConfig = nil // a static secret of that name
		case *hcmv3.HttpConnectionManager:
			x.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: proto.Clone(rs.Routes[0]).(*routev3.RouteConfiguration)}
			routes++
		}
	})
	if routes != len(rs.Listeners) {
		t.Fatalf("inlined %d route tables for %d listeners", routes, len(rs.Listeners))
	}
	return b
}

// TestEnvoyValidatesSnapshot runs `envoy --mode validate` on the whole translation, rendered as
// static_resources: every listener, route, cluster and secret.
func TestEnvoyValidatesSnapshot(t *testing.T) {
	envoy := envoyBin(t)
	o, _ := envoyPKI(t)
	rs, err := Translate(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"), o)
	if err != nil {
		t.Fatal(err)
	}
	y, err := envoyconf.BootstrapYAML(staticSnapshot(t, rs))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snapshot.yaml")
	os.WriteFile(path, y, 0o644)
	validate(t, envoy, path)
}

// TestLiveEnvoyACKs runs a real Envoy against the real xDS server, over delta and then state of the
// world: it must ACK listeners, routes, clusters and secrets (there are no EDS resources), NACK
// nothing, and hold every secret skewgate serves.
func TestLiveEnvoyACKs(t *testing.T) {
	envoy := envoyBin(t)
	o, _ := envoyPKI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{Options: o, Source: newFakeSource(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml")), Logger: zaptest.NewLogger(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ctx, s, lis)
	want, err := Translate(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"), o)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{"listener", "route", "cluster", "secret"}
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "sotw"}[delta], func(t *testing.T) {
			dir := t.TempDir()
			b, err := envoyconf.Bootstrap(envoyconf.BootstrapOptions{NodeID: "envoy-" + strconv.FormatBool(delta), NodeCluster: "test", XDSAddress: lis.Addr().String(), Delta: delta, AdminAddress: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			y, _ := envoyconf.BootstrapYAML(b)
			path := filepath.Join(dir, "bootstrap.yaml")
			os.WriteFile(path, y, 0o644)
			before := map[string]float64{}
			for _, typ := range types {
				before[typ] = testutil.ToFloat64(s.m.acks.WithLabelValues(typ))
			}
			adminPath := filepath.Join(dir, "admin")
			cmd := exec.CommandContext(ctx, envoy, "-c", path, "--use-dynamic-base-id", "--concurrency", "1", "--log-level", "warn", "--admin-address-path", adminPath)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				for _, typ := range append(types, "endpoint") {
					if n := testutil.ToFloat64(s.m.nacks.WithLabelValues(typ)); n != 0 {
						t.Fatalf("Envoy NACKed %s (%v times); the log above has the detail", typ, n)
					}
				}
				if n := testutil.ToFloat64(s.m.refused.WithLabelValues(refusedTooOld)) + testutil.ToFloat64(s.m.refused.WithLabelValues(refusedUnknownVersion)); n != 0 {
					t.Fatalf("skewgate refused this Envoy (%v streams): it is not a supported release (envoy/README.md)", n)
				}
				acked := 0
				for _, typ := range types {
					if testutil.ToFloat64(s.m.acks.WithLabelValues(typ)) > before[typ] {
						acked++
					}
				}
				if acked == len(types) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Envoy ACKed only %d of %v within 30s", acked, types)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Envoy holds every secret and every cluster skewgate serves.
			dump := adminGet(t, adminPath, "/config_dump?resource=dynamic_active_secrets")
			for _, sec := range want.Secrets {
				if !strings.Contains(dump, `"name": "`+sec.Name+`"`) {
					t.Errorf("Envoy has no active secret %s", sec.Name)
				}
			}
			clusters := adminGet(t, adminPath, "/clusters?format=json")
			for _, c := range want.ClusterNames() {
				if !strings.Contains(clusters, `"name": "`+c+`"`) {
					t.Errorf("Envoy has no cluster %s", c)
				}
			}
		})
	}
}

// adminGet reads path from the admin listener whose address Envoy wrote to addrPath.
func adminGet(t *testing.T, addrPath, path string) string {
	t.Helper()
	var addr []byte
	waitUntil(t, "the admin address", func() bool { addr, _ = os.ReadFile(addrPath); return len(addr) > 0 })
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin %s: %s", path, resp.Status)
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		t.Fatalf("admin %s: not JSON: %.200s", path, body)
	}
	pretty, _ := json.MarshalIndent(v, "", " ")
	return string(pretty)
}
