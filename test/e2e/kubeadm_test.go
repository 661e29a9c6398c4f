package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	kubeadm "github.com/skewgate/skewgate/internal/install"
	"github.com/skewgate/skewgate/test/testbed"
)

// kubeadmNode lays out the testbed as the kubeadm control-plane node of apiserver a: its PKI under
// kubeadm's file names (the testbed's cluster CA, a's serving certificate, the front-proxy client)
// and a kube-apiserver static pod carrying kubeadm's advertise-address annotation.
func kubeadmNode(t *testing.T, tb *testbed.Testbed, a testbed.Apiserver) (root string) {
	t.Helper()
	root = t.TempDir()
	pki, manifests := filepath.Join(root, "pki"), filepath.Join(root, "manifests")
	for _, d := range []string{pki, manifests} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for dst, src := range map[string]string{
		"ca.crt": tb.PKI.CA.Cert, "ca.key": tb.PKI.CA.Key,
		"apiserver.crt": a.Serving.Cert, "apiserver.key": a.Serving.Key,
		"front-proxy-client.crt": tb.PKI.FrontProxyClient.Cert, "front-proxy-client.key": tb.PKI.FrontProxyClient.Key,
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pki, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	apiserverPod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n  annotations:\n" +
		"    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: " + a.Address() + "\n" +
		"spec:\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:" + a.Version + "\n"
	if err := os.WriteFile(filepath.Join(manifests, "kube-apiserver.yaml"), []byte(apiserverPod), 0o600); err != nil {
		t.Fatal(err)
	}
	return root
}

// serveArgs returns the values of each --flag=value in the skewgate static pod's arguments.
func serveArgs(t *testing.T, manifest string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, a := range pod.Spec.Containers[0].Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		out[k] = append(out[k], v)
	}
	return out
}

// TestKubeadmInstall runs the install on a node laid out like kubeadm's, then checks what it rendered
// against the testbed: the static pods pass a server-side dry run as Pods in kube-system, the RBAC
// applies, and skewgate's own kubeconfig and certificate, with exactly that RBAC, let discovery build
// a Topology of both apiservers while everything else is refused.
func TestKubeadmInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the testbed")
	}
	tb := testbed.StartT(t, testbed.Config{})
	admin := tb.AdminTokenKubeconfig()
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	root := kubeadmNode(t, tb, old)

	o := kubeadm.Options{
		NodeName: old.Name, PKIDir: filepath.Join(root, "pki"), ManifestsDir: filepath.Join(root, "manifests"),
		ConfigDir: filepath.Join(root, "skewgate"), SocketDir: filepath.Join(root, "sockets"),
		AllowedCIDRs: []string{neu.IP.String() + "/32"},
	}.WithDefaults()
	o, err := o.DetectNode()
	if err != nil {
		t.Fatal(err)
	}
	if o.APIServerEndpoint != old.Address() {
		t.Fatalf("endpoint from the kube-apiserver manifest %q, want %q", o.APIServerEndpoint, old.Address())
	}
	plan, err := kubeadm.Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeadm.Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}

	// The testbed has no controller-manager to create kube-system/default, which every cluster has.
	mustKubectl(t, admin, "create", "serviceaccount", "default", "-n", "kube-system")
	for _, m := range []string{"skewgate.yaml", "skewgate-envoy.yaml"} {
		out := mustKubectl(t, admin, "apply", "--dry-run=server", "-o", "yaml", "-f", filepath.Join(o.ManifestsDir, m))
		var pod corev1.Pod
		if err := yaml.Unmarshal([]byte(out), &pod); err != nil {
			t.Fatal(err)
		}
		// Admission resolved the class to the number the kubelet uses for a static pod.
		if pod.Namespace != "kube-system" || pod.Spec.Priority == nil || *pod.Spec.Priority != 2000001000 || !pod.Spec.HostNetwork {
			t.Errorf("%s after the dry run: namespace %q priority %v hostNetwork %v", m, pod.Namespace, pod.Spec.Priority, pod.Spec.HostNetwork)
		}
	}
	mustKubectl(t, admin, "apply", "-f", filepath.Join(o.ConfigDir, kubeadm.RBACFile))

	// skewgate's credential, as the static pod uses it.
	args := serveArgs(t, filepath.Join(o.ManifestsDir, "skewgate.yaml"))
	kc := args["--kubeconfig"][0]
	who := mustKubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if who != `skewgate ["system:authenticated"]` {
		t.Errorf("the rendered credential is %q, want user skewgate in no group of its own", who)
	}
	runDiscovery(t, kc, args, old, neu)

	// The EndpointSlice rule is by name: the informer's request (field selector on the name) is
	// allowed, a list of every EndpointSlice is not.
	if _, stderr, err := kubectl(kc, "get", "endpointslices", "-n", "default", "--field-selector", "metadata.name=kubernetes"); err != nil {
		t.Errorf("listing default/kubernetes EndpointSlice by name: %v %s", err, stderr)
	}
	for _, req := range [][]string{
		{"get", "endpointslices", "-n", "default"},
		{"get", "secrets", "-n", "kube-system"},
		{"get", "pods", "-A"},
		{"get", "configmaps", "-n", "kube-system"},
		{"get", "leases", "-n", "kube-system", "apiserver-does-not-matter"},
		{"create", "namespace", "skewgate-should-not"},
		{"get", "--raw", "/metrics"},
	} {
		_, stderr, err := kubectl(kc, req...)
		if err == nil || !strings.Contains(stderr, `User "skewgate"`) || !strings.Contains(stderr, "forbidden") {
			t.Errorf("kubectl %v as skewgate: %v %q, want forbidden", req, err, stderr)
		}
	}
	for _, check := range [][]string{
		{"get", "leases", "-n", "kube-system"}, {"list", "leases", "-n", "default"}, {"update", "leases", "-n", "kube-system"},
		{"delete", "endpointslices/kubernetes", "-n", "default"}, {"create", "customresourcedefinitions"}, {"get", "customresourcedefinitions"},
		{"impersonate", "users"}, {"create", "certificatesigningrequests"},
	} {
		out, _, _ := kubectl(admin, append([]string{"auth", "can-i", "--as", kubeadm.User}, check...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("skewgate can %v: %q", check, out)
		}
	}
}

// runDiscovery runs discovery as skewgate serve would from its rendered arguments, and waits for a
// Topology with both apiservers ready and their capabilities read.
func runDiscovery(t *testing.T, kubeconfig string, args map[string][]string, old, neu testbed.Apiserver) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != old.URL() {
		t.Errorf("kubeconfig server %q, want the local apiserver %q", cfg.Host, old.URL())
	}
	var static []discovery.StaticUpstream
	for _, s := range args["--static-upstream"] {
		u, err := discovery.ParseStaticUpstream(s)
		if err != nil {
			t.Fatal(err)
		}
		static = append(static, u)
	}
	if len(static) != 1 || static[0].Name != old.Name || static[0].Address != old.Address() {
		t.Errorf("static upstreams %v, want only the local apiserver %s=%s", static, old.Name, old.Address())
	}
	cidrs, err := discovery.ParseCIDRs(args["--allowed-cidr"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := discovery.New(discovery.Config{
		Client: kubernetes.NewForConfigOrDie(cfg), Metadata: metadata.NewForConfigOrDie(cfg), Upstream: cfg,
		Static: static, Policy: discovery.AddressPolicy{CIDRs: cidrs}, TrustEndpointSlice: true,
		ProbeInterval: 200 * time.Millisecond, Logger: zaptest.NewLogger(t), Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	for {
		if top := c.Current(); top != nil {
			o, ok1 := top.Upstream(old.Name)
			n, ok2 := top.Upstream(neu.Name)
			if ok1 && ok2 && o.Capabilities && n.Capabilities && o.Ready && n.Ready {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery with skewgate's rendered credential never saw both apiservers: %+v", c.Current())
		}
		time.Sleep(100 * time.Millisecond) // polling the Topology
	}
}
