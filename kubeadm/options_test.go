package kubeadm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.NodeName = "" }, "--node-name"},
		{func(o *Options) { o.NodeName = "CP_1" }, "--node-name"},
		{func(o *Options) { o.APIServerEndpoint = "cp-1:6443" }, `--apiserver-endpoint "cp-1:6443"`},
		{func(o *Options) { o.APIServerEndpoint = "10.0.0.11" }, "--apiserver-endpoint"},
		{func(o *Options) { o.APIServerEndpoint = "10.0.0.11:0" }, "bad port"},
		{func(o *Options) { o.FrontPort = 6443 }, "--front-port 6443 is the apiserver's own port"},
		{func(o *Options) { o.FrontPort = 70000 }, "--front-port 70000"},
		{func(o *Options) { o.FrontPort = 443 }, "--front-port 443: out of range [1024, 65535] (Envoy runs without capabilities)"},
		{func(o *Options) { o.FrontPort = 18080 }, "--front-port 18080 is also --http-listen's port"},
		{func(o *Options) { o.PKIDir = "pki" }, `--pki-dir "pki"`},
		{func(o *Options) { o.ConfigDir = "/etc/skewgate/" }, "--config-dir"},
		{func(o *Options) { o.ConfigDir = filepath.Join(o.ManifestsDir, "skewgate") }, "is inside --manifests-dir"},
		{func(o *Options) { o.SocketDir = o.ManifestsDir }, "is inside --manifests-dir"},
		{func(o *Options) { o.SocketDir = "/" + strings.Repeat("s", 100) }, "too long for a unix socket"},
		{func(o *Options) { o.HTTPListen = "0.0.0.0:18080" }, "--http-listen"},
		{func(o *Options) { o.EnvoyImage = "envoy proxy" }, "--envoy-image"},
		{func(o *Options) { o.SkewgateImage = "" }, "--skewgate-image is required"},
		{func(o *Options) { o.AllowedCIDRs = []string{"10.0.0.0/33"} }, "--allowed-cidr"},
	} {
		n := newNode(t)
		o := n.options()
		tc.mutate(&o)
		before := snapshot(t, n.root)
		_, err := Render(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
		if after := snapshot(t, n.root); len(after) != len(before) {
			t.Errorf("%q: a refused input wrote %d paths", tc.want, len(after)-len(before))
		}
	}
}

func TestRenderRefusesANodeWithoutItsPKI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, pki string)
		want   string
	}{
		{"no CA key", func(t *testing.T, pki string) { os.Remove(filepath.Join(pki, "ca.key")) }, "cluster CA key"},
		{"no serving certificate", func(t *testing.T, pki string) { os.Remove(filepath.Join(pki, "apiserver.crt")) }, "apiserver.crt"},
		{"key mismatch", func(t *testing.T, pki string) {
			b, _ := os.ReadFile(filepath.Join(pki, "front-proxy-client.key"))
			write(t, filepath.Join(pki, "apiserver.key"), b, 0o600)
		}, "apiserver.crt and apiserver.key"},
		{"CA key of another CA", func(t *testing.T, pki string) {
			other := newNode(t)
			b, _ := os.ReadFile(filepath.Join(other.root, "pki", "ca.key"))
			write(t, filepath.Join(pki, "ca.key"), b, 0o600)
		}, "ca.key belongs to no certificate in ca.crt"},
		{"CA unreadable", func(t *testing.T, pki string) { write(t, filepath.Join(pki, "ca.crt"), []byte("garbage"), 0o644) }, "cluster CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			tc.mutate(t, filepath.Join(n.root, "pki"))
			_, err := Render(n.options())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestDetectNode(t *testing.T) {
	dir := t.TempDir()
	o := Options{NodeName: "cp-1", ManifestsDir: dir}
	manifest := filepath.Join(dir, "kube-apiserver.yaml")
	for _, tc := range []struct{ name, manifest, want, err string }{
		{"annotation", `apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.0.0.11:6443
spec:
  containers:
  - command: [kube-apiserver, --advertise-address=10.9.9.9]
`, "10.0.0.11:6443", ""},
		{"flags", `apiVersion: v1
kind: Pod
spec:
  containers:
  - command: [kube-apiserver, --advertise-address=10.0.0.12, --secure-port=7443]
`, "10.0.0.12:7443", ""},
		{"neither", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kube-apiserver]\n", "", "give --apiserver-endpoint"},
		{"not yaml", "\t{", "", "kube-apiserver.yaml"},
		{"missing", "", "", "kube-apiserver manifest is unreadable"},
	} {
		os.Remove(manifest)
		if tc.manifest != "" {
			write(t, manifest, []byte(tc.manifest), 0o600)
		}
		got, err := o.DetectNode()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.APIServerEndpoint != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.name, got.APIServerEndpoint, err, tc.want)
		}
	}
	// An explicit endpoint wins over the manifest.
	o.APIServerEndpoint = "10.0.0.13:6443"
	if got, err := o.DetectNode(); err != nil || got.APIServerEndpoint != "10.0.0.13:6443" {
		t.Errorf("explicit endpoint: %q (%v)", got.APIServerEndpoint, err)
	}
}

// The manifests at the default paths, for the reader: testdata/default-*.golden.
func TestDefaultPathsGolden(t *testing.T) {
	o := Options{NodeName: "cp-1", APIServerEndpoint: "10.0.0.11:6443", SkewgateImage: SkewgateImage("v0.9.0")}.WithDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	n := &node{root: "/nonexistent-root"}
	for name, pod := range map[string]*corev1.Pod{"default-skewgate.yaml": o.skewgatePod([]byte("cert"), []byte("ca")), "default-skewgate-envoy.yaml": o.envoyPod()} {
		y, err := objectsYAML(pod)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, n, name, y)
	}
}

// TestIPv6Front: on a control plane that advertises IPv6 the front listens on every IPv6 address and
// Envoy's readiness probe dials the IPv6 loopback.
func TestIPv6Front(t *testing.T) {
	for endpoint, want := range map[string][2]string{"10.0.0.11:6443": {"0.0.0.0", "127.0.0.1"}, "[fd00::11]:6443": {"::", "::1"}} {
		o := Options{NodeName: "cp-1", APIServerEndpoint: endpoint, SkewgateImage: SkewgateImage("v0.9.0")}.WithDefaults()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(o.ServeArgs(), "--front-address="+want[0]) {
			t.Errorf("%s: serve args %v, want --front-address=%s", endpoint, o.ServeArgs(), want[0])
		}
		if got := o.envoyPod().Spec.Containers[0].ReadinessProbe.TCPSocket.Host; got != want[1] {
			t.Errorf("%s: Envoy's readiness probe dials %s, want %s", endpoint, got, want[1])
		}
	}
}

// TestCABundle: during a CA rotation ca.crt holds the old and the new CA; the command issues from the
// one ca.key belongs to, whatever its place in the bundle.
func TestCABundle(t *testing.T) {
	n := newNode(t)
	other := newNode(t)
	pki := filepath.Join(n.root, "pki")
	mine, _ := os.ReadFile(filepath.Join(pki, "ca.crt"))
	theirs, _ := os.ReadFile(filepath.Join(other.root, "pki", "ca.crt"))
	write(t, filepath.Join(pki, "ca.crt"), append(theirs, mine...), 0o644)
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Issued {
		t.Fatal("no certificate issued on a fresh node")
	}
}

// TestApplyRefusesAForeignDirectory: a socket or config directory that exists and belongs to another
// user is refused before anything is written.
func TestApplyRefusesAForeignDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user (the command runs as root)")
	}
	n := newNode(t)
	sockets := filepath.Join(n.root, "sockets")
	if err := os.MkdirAll(sockets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sockets, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Apply(plan, false, nil)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("Apply over a directory of uid 65534: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.root, "manifests", "skewgate.yaml")); !os.IsNotExist(err) {
		t.Errorf("a manifest was written before the refusal: %v", err)
	}
}

// TestForwardCertificateUIDRendered: the option renders skewgate serve --forward-certificate-uid, which
// serve accepts, and without it the flag is absent (certificates with a UID are refused).
func TestForwardCertificateUIDRendered(t *testing.T) {
	for _, forward := range []bool{false, true} {
		o := Options{NodeName: "cp-1", APIServerEndpoint: "10.0.0.11:6443", SkewgateImage: SkewgateImage("v0.9.0"), ForwardCertificateUID: forward}.WithDefaults()
		args := o.ServeArgs()
		if got := slices.Contains(args, "--forward-certificate-uid"); got != forward {
			t.Errorf("ForwardCertificateUID %v: serve args %v", forward, args)
		}
		if err := checkServeArgs(args); err != nil {
			t.Errorf("ForwardCertificateUID %v: serve refuses its args: %v", forward, err)
		}
	}
}

// TestKubernetesEndpointsRendered: the option renders the mode's serve flags, which serve accepts,
// with the node's advertise address, and the mode's RBAC; a loopback advertise address is refused
// (the apiserver refuses loopback endpoints).
func TestKubernetesEndpointsRendered(t *testing.T) {
	o := Options{NodeName: "cp-1", APIServerEndpoint: "10.0.0.11:6443", SkewgateImage: SkewgateImage("v0.9.0"), KubernetesEndpoints: true}.WithDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--allowed-cidr") {
		t.Errorf("the mode without --allowed-cidr: %v", err)
	}
	o.AllowedCIDRs = []string{"10.0.0.0/24"}
	if err := o.Validate(); err != nil {
		t.Errorf("the mode with --allowed-cidr: %v", err)
	}
	args := o.ServeArgs()
	for _, want := range []string{"--kubernetes-endpoints", "--kubernetes-endpoint-address=10.0.0.11", "--kubernetes-endpoints-member=cp-1"} {
		if !slices.Contains(args, want) {
			t.Errorf("serve args %v lack %s", args, want)
		}
	}
	if err := checkServeArgs(args); err != nil {
		t.Errorf("serve refuses its args: %v", err)
	}
	o.APIServerEndpoint = "127.0.0.1:6443"
	if err := checkServeArgs(o.ServeArgs()); err == nil || !strings.Contains(err.Error(), "--kubernetes-endpoint-address=127.0.0.1") {
		t.Errorf("a loopback advertise address: %v", err)
	}
	o.KubernetesEndpoints = false
	if slices.ContainsFunc(o.ServeArgs(), func(a string) bool { return strings.HasPrefix(a, "--kubernetes-endpoint") }) {
		t.Errorf("without the option: %v", o.ServeArgs())
	}
}
