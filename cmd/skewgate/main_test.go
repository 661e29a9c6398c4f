package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

func TestTopologyCommand(t *testing.T) {
	view := serve.TopologyView{Version: "t-7", Generated: time.Unix(0, 0).UTC(), Snapshot: "s-3",
		Upstreams: []discovery.Upstream{{Name: "old", Address: "10.0.0.1:6443", Version: "v1.35.4", Ready: true, Source: discovery.SourceStatic}},
		Unproven:  []discovery.Upstream{{Name: "joining", Address: "10.0.0.9:6443", Source: discovery.SourceLease}},
		Ignored:   []discovery.IgnoredLease{{Lease: "apiserver-abc", Hostname: "cp-2", Reason: discovery.IgnoredNoAddress, Hint: "add --static-upstream=cp-2=<ip>:<port>"}},
		Skewed:    []discovery.SkewedResource{{Key: discovery.ResourceKey{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}, Decision: "route", Set: "new"}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/topology" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(view)
	}))
	defer srv.Close()
	var out bytes.Buffer
	cmd := newTopologyCommand(&out)
	cmd.SetArgs([]string{"--server", strings.TrimPrefix(srv.URL, "http://")})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Topology t-7", "old", "v1.35.4", "admissionregistration.k8s.io/v1 mutatingadmissionpolicies", "skewgate-upstream-new",
		"joining", "unproven: no cluster", "apiserver-abc", "cp-2", "no_address", "--static-upstream=cp-2="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBootstrapCommandRefusesUnsafe(t *testing.T) {
	cmd := newBootstrapCommand()
	cmd.SetArgs([]string{"--node-id", "n1", "--xds-address", "10.0.0.5:18000"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("plaintext xDS to a remote address accepted: %v", err)
	}
}

// TestBootstrapCommandPlaintextLoopback: plaintext xDS on loopback TCP needs the development flag;
// the default is the unix socket `skewgate serve` listens on.
func TestBootstrapCommandPlaintextLoopback(t *testing.T) {
	run := func(args ...string) (string, error) {
		cmd := newBootstrapCommand()
		var out bytes.Buffer
		cmd.SetArgs(append([]string{"--node-id", "n1"}, args...))
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		return out.String(), err
	}
	if _, err := run("--xds-address", "127.0.0.1:18000"); err == nil || !strings.Contains(err.Error(), "--grpc-plaintext-loopback") {
		t.Errorf("plaintext xDS on loopback TCP: %v, want a refusal naming --grpc-plaintext-loopback", err)
	}
	if _, err := run("--xds-address", "127.0.0.1:18000", "--grpc-plaintext-loopback"); err != nil {
		t.Errorf("with --grpc-plaintext-loopback: %v", err)
	}
	out, err := run()
	if err != nil || !strings.Contains(out, "path: /var/lib/skewgate/xds.sock") {
		t.Errorf("the default: %v\n%s", err, out)
	}
}

// TestBootstrapCommandWritesSDSFiles: with mTLS the command writes the SDS files the bootstrap names.
func TestBootstrapCommandWritesSDSFiles(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bootstrap.yaml")
	cmd := newBootstrapCommand()
	cmd.SetArgs([]string{"--node-id", "n1", "--xds-address", "10.0.0.5:18000",
		"--xds-ca-file", "/etc/skewgate/xds/ca.crt", "--xds-cert-file", "/etc/skewgate/xds/tls.crt", "--xds-key-file", "/etc/skewgate/xds/tls.key",
		"--sds-dir", "/etc/skewgate/envoy/sds", "--sds-output-dir", filepath.Join(dir, "sds"), "-o", out})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{envoyconf.XDSCertSDSFile, envoyconf.XDSCASDSFile} {
		sds, err := os.ReadFile(filepath.Join(dir, "sds", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(sds), "/etc/skewgate/xds/") {
			t.Errorf("%s does not name the certificate files:\n%s", name, sds)
		}
		if !strings.Contains(string(b), "/etc/skewgate/envoy/sds/"+name) {
			t.Errorf("the bootstrap does not reference %s:\n%s", name, b)
		}
	}
}

func TestCheckGCPercent(t *testing.T) {
	for v, ok := range map[int]bool{-1: true, 10: true, 400: true, 1000: true, 0: false, -2: false, 9: false, 1001: false} {
		err := checkGCPercent(v)
		if (err == nil) != ok {
			t.Errorf("--gc-percent=%d: error %v, want ok=%v", v, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("--gc-percent=%d", v)) {
			t.Errorf("error %q does not name --gc-percent=%d", err, v)
		}
	}
}

// TestServeValidatesBeforeStarting: `serve` refuses a bad --gc-percent with the other flag errors,
// before it changes the process's GC setting or starts anything.
func TestServeValidatesBeforeStarting(t *testing.T) {
	before := debug.SetGCPercent(123)
	defer debug.SetGCPercent(before)
	cmd := newServeCommand()
	cmd.SetArgs([]string{"--gc-percent=5000", "--extproc-timeout=0s"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	for _, want := range []string{"--gc-percent=5000", "--extproc-timeout=0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve: error %v does not name %s", err, want)
		}
	}
	if now := debug.SetGCPercent(123); now != 123 {
		t.Errorf("serve changed the GC percent to %d before its flags were valid", now)
	}
}

// TestGCPercentIsTheCommands: the flag is the serve command's, not the serve package's (library code
// never changes process-wide settings).
func TestGCPercentIsTheCommands(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	options.NewOptions().AddFlags(fs)
	if fs.Lookup("gc-percent") != nil {
		t.Error("serve/options registers --gc-percent")
	}
	if f := newServeCommand().Flags().Lookup("gc-percent"); f == nil || f.DefValue != "400" {
		t.Errorf("serve has no --gc-percent defaulting to 400: %v", f)
	}
}
