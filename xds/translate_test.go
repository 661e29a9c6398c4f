package xds

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testOptions are the Options of every golden file: paths as they would be on an Envoy host.
func testOptions() Options {
	return Options{
		ServingCertFile:    "/etc/skewgate/front/tls.crt",
		ServingKeyFile:     "/etc/skewgate/front/tls.key",
		ClientCAFile:       "/etc/kubernetes/pki/ca.crt",
		UpstreamCAFile:     "/etc/kubernetes/pki/ca.crt",
		FrontProxyCertFile: "/etc/kubernetes/pki/front-proxy-client.crt",
		FrontProxyKeyFile:  "/etc/kubernetes/pki/front-proxy-client.key",
		ExtProcAddress:     "127.0.0.1:18001",
	}
}

// emptyTopology is a synced discovery that knows no upstream.
func emptyTopology() *discovery.Topology { return discovery.Build("empty", time.Unix(0, 0), nil) }

// toYAML renders messages as YAML: protojson (whose spacing is deliberately unstable) re-encoded.
func toYAML[M proto.Message](t testing.TB, msgs []M) []byte {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		j, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "---\n"...)
		out = append(out, y...)
	}
	return out
}

// TestTranslateGolden compares the translation of every testdata/<case>.in.yaml with
// testdata/<case>.<kind>.golden.yaml. `go test ./xds -run Golden -update` rewrites them and removes
// golden files whose case is gone.
func TestTranslateGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	want := map[string]bool{}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			rs, err := Translate(xdstest.Scenario(t, in), testOptions())
			if err != nil {
				t.Fatal(err)
			}
			for kind, got := range map[string][]byte{
				"listeners": toYAML(t, rs.Listeners),
				"routes":    toYAML(t, rs.Routes),
				"clusters":  toYAML(t, rs.Clusters),
				"secrets":   toYAML(t, rs.Secrets),
			} {
				path := filepath.Join("testdata", name+"."+kind+".golden.yaml")
				want[path] = true
				checkGolden(t, path, got, "go test ./xds -run Golden -update")
			}
		})
	}
	goldens, _ := filepath.Glob("testdata/*.golden.yaml")
	for _, g := range goldens {
		if want[g] {
			continue
		}
		if *update {
			os.Remove(g)
		} else {
			t.Errorf("stale golden file %s (its case is gone; -update removes it)", g)
		}
	}
}

// checkGolden holds got to the golden file at path (xdstest.CheckGolden, -update rewrites it).
func checkGolden(t *testing.T, path string, got []byte, rerun string) {
	t.Helper()
	xdstest.CheckGolden(t, path, got, *update, rerun)
}

func TestTranslateClusters(t *testing.T) {
	top := xdstest.Scenario(t, "testdata/three-two-sets.in.yaml")
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range rs.ClusterNames() {
		got[n] = true
	}
	// Every cluster a decision can name exists, with its HTTP/1.1 and anonymous twins.
	named := []string{wire.AllCluster}
	for _, u := range top.Upstreams {
		named = append(named, wire.UpstreamCluster(u.Name))
	}
	for _, s := range top.Skewed() {
		if s.Set != "" {
			named = append(named, wire.SetCluster(s.Set.Members()))
		}
	}
	for _, c := range named {
		if !got[c] || !got[wire.HTTP1Cluster(c)] || !got[wire.AnonCluster(c)] {
			t.Errorf("cluster %s or a twin missing from %v", c, rs.ClusterNames())
		}
	}
	if len(top.Sets) != 1 {
		t.Errorf("sets = %v, want one ({b, c})", top.Sets)
	}
	if !got[wire.ExtProcCluster] {
		t.Errorf("ext_proc cluster missing")
	}
}

// TestEnvoyVerifiesUpstreamsAsDiscoveryDoes: Envoy and discovery verify the same apiserver
// certificates; if they checked different names, an upstream discovery proved would fail in Envoy.
func TestEnvoyVerifiesUpstreamsAsDiscoveryDoes(t *testing.T) {
	if wire.UpstreamSNI != discovery.ServerName {
		t.Errorf("Envoy verifies apiservers for %q, discovery for %q", wire.UpstreamSNI, discovery.ServerName)
	}
}
