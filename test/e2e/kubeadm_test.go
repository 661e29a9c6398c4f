package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/kubeadm"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/test/testbed"
)

// TestKubeadmInstall runs the install on a node laid out like kubeadm's, applies the RBAC it rendered
// to the testbed, and checks skewgate's own kubeconfig and certificate with exactly that RBAC:
// discovery builds a Topology of both apiservers, and everything else is refused.
func TestKubeadmInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the testbed")
	}
	tb := testbed.StartT(t, testbed.Config{})
	admin := tb.AdminTokenKubeconfig()
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	o := installOn(t, tb, old, neu.IP.String()+"/32")
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
	// What discovery reads, each allowed: a missing rule would only slow the first Topology down
	// (discovery builds without informers after its initial timeout), so it is asked for by name.
	for _, check := range [][]string{
		{"list", "leases", "-n", "kube-system"}, {"watch", "leases", "-n", "kube-system"},
		{"list", "endpointslices/kubernetes", "-n", "default"}, {"watch", "endpointslices/kubernetes", "-n", "default"},
		{"list", "customresourcedefinitions.apiextensions.k8s.io"}, {"watch", "customresourcedefinitions.apiextensions.k8s.io"},
		{"list", "apiservices.apiregistration.k8s.io"}, {"watch", "apiservices.apiregistration.k8s.io"},
		{"get", "/api"}, {"get", "/apis"}, {"get", "/version"}, {"get", "/readyz"},
	} {
		out, _, _ := kubectl(admin, append([]string{"auth", "can-i", "--as", kubeadm.User}, check...)...)
		if strings.TrimSpace(out) != "yes" {
			t.Errorf("skewgate cannot %v: %q", check, out)
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
	// serve's own parsing of the flags the install renders.
	so := options.NewOptions()
	so.Kubeconfig, so.StaticUpstreams, so.AllowedCIDRs = kubeconfig, args["--static-upstream"], args["--allowed-cidr"]
	so.Validate() // the Envoy flags are not given here; only the parsed lists below are used
	var static []discovery.StaticUpstream
	for _, u := range so.Static() {
		static = append(static, discovery.StaticUpstream{Name: u.Name, Address: u.Address})
	}
	if len(static) != 1 || static[0].Name != old.Name || static[0].Address != old.Address() || len(so.Static()) != len(args["--static-upstream"]) {
		t.Errorf("static upstreams %v of %q, want only the local apiserver %s=%s", static, args["--static-upstream"], old.Name, old.Address())
	}
	cidrs := so.CIDRs()
	if len(cidrs) != len(args["--allowed-cidr"]) {
		t.Fatalf("--allowed-cidr %q parsed as %v", args["--allowed-cidr"], cidrs)
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
