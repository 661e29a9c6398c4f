package xds

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// exampleBootstrap is the example under envoy/; `go test ./xds -run Bootstrap -update` rewrites it.
func exampleBootstrap() BootstrapOptions {
	return BootstrapOptions{
		NodeID: "front-1", NodeCluster: "skewgate-front",
		XDSAddress: "skewgate-xds.skewgate-system.svc:18000",
		XDSCAFile:  "/etc/skewgate/xds/ca.crt", XDSCertFile: "/etc/skewgate/xds/tls.crt", XDSKeyFile: "/etc/skewgate/xds/tls.key",
		Delta: true,
	}
}

// The example, and its copy the deploy/envoy kustomization turns into a ConfigMap.
const exampleBootstrapPath = "../envoy/bootstrap.yaml"

var bootstrapCopies = []string{exampleBootstrapPath, "../deploy/envoy/bootstrap.yaml"}

func TestBootstrapGolden(t *testing.T) {
	b, err := Bootstrap(exampleBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	got, err := BootstrapYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]byte("# Rendered by `skewgate bootstrap` (see README); checked by TestBootstrapGolden.\n"), got...)
	for _, path := range bootstrapCopies {
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != string(got) {
			t.Errorf("%s is stale (go test ./xds -run Bootstrap -update)\n%s", path, lineDiff(string(want), string(got)))
		}
	}
}

func TestBootstrapRefusesUnsafe(t *testing.T) {
	for name, mut := range map[string]func(*BootstrapOptions){
		"admin off loopback":    func(o *BootstrapOptions) { o.AdminAddress = "0.0.0.0:9901" },
		"plaintext xDS off-box": func(o *BootstrapOptions) { o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile = "", "", "" },
		"half of mTLS":          func(o *BootstrapOptions) { o.XDSKeyFile = "" },
		"no node id":            func(o *BootstrapOptions) { o.NodeID = "" },
		"no xDS address":        func(o *BootstrapOptions) { o.XDSAddress = "" },
	} {
		o := exampleBootstrap()
		mut(&o)
		if _, err := Bootstrap(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := exampleBootstrap()
	o.XDSAddress, o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile = "unix:///run/skewgate/xds.sock", "", "", ""
	if _, err := Bootstrap(o); err != nil {
		t.Errorf("unix socket refused: %v", err)
	}
}

// TestEnvoyValidatesBootstrap runs `envoy --mode validate` on the rendered bootstrap when ENVOY_BIN
// points at an Envoy binary.
func TestEnvoyValidatesBootstrap(t *testing.T) {
	envoy := os.Getenv("ENVOY_BIN")
	if envoy == "" {
		t.Skip("ENVOY_BIN is not set: no Envoy binary can be installed on this machine, so `envoy --mode validate` is skipped; set ENVOY_BIN=/path/to/envoy to run it")
	}
	o := exampleBootstrap()
	o.XDSAddress, o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile = "127.0.0.1:18000", "", "", ""
	b, err := Bootstrap(o)
	if err != nil {
		t.Fatal(err)
	}
	y, err := BootstrapYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(path, y, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(envoy, "--mode", "validate", "-c", path).CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate: %v\n%s", err, out)
	}
}
