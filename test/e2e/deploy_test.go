package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/test/testbed"
)

const deployDir = "../../deploy"

// TestDeployManifests applies every manifest under deploy/ to the testbed with a server-side dry run,
// then runs discovery with the token of the ServiceAccount the manifests create: its RBAC is enough
// to build the Topology, and no more than that.
func TestDeployManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the testbed")
	}
	tb := testbed.StartT(t, testbed.Config{})
	kc := tb.AdminTokenKubeconfig()
	base := filepath.Join(deployDir, "base")
	// The namespace, ServiceAccount and RBAC for real (the ServiceAccount's token is used below)...
	mustKubectl(t, kc, "apply", "-f", filepath.Join(base, "namespace.yaml"), "-f", filepath.Join(base, "serviceaccount.yaml"), "-f", filepath.Join(base, "rbac.yaml"))
	// The testbed has no controller-manager to create kube-system/default, which every cluster has.
	mustKubectl(t, kc, "create", "serviceaccount", "default", "-n", "kube-system")
	// ...and everything with a server-side dry run: schema, defaults and admission of the real server.
	for _, args := range [][]string{
		{"apply", "--dry-run=server", "-k", base},
		{"apply", "--dry-run=server", "-k", filepath.Join(deployDir, "envoy")},
		{"apply", "--dry-run=server", "-f", filepath.Join(deployDir, "envoy", "static-pod.yaml")},
	} {
		out := mustKubectl(t, kc, args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}

	token := strings.TrimSpace(mustKubectl(t, kc, "create", "token", "skewgate", "-n", "skewgate-system"))
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")
	cfg := tb.RESTConfig(old.URL(), testbed.AdminByToken)
	cfg.BearerToken = token
	c, err := discovery.New(discovery.Config{
		Client: kubernetes.NewForConfigOrDie(cfg), Metadata: metadata.NewForConfigOrDie(cfg), Upstream: cfg,
		Static:        []discovery.StaticUpstream{{Name: "old", Address: old.Address()}},
		Policy:        discovery.AddressPolicy{CIDRs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(neu.IP.String()), 24).Masked()}},
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
			o, ok1 := top.Upstream("old")
			n, ok2 := top.Upstream("new")
			if ok1 && ok2 && o.Capabilities && n.Capabilities && o.Ready && n.Ready {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery with the ServiceAccount's token never saw both upstreams: %+v", c.Current())
		}
		time.Sleep(100 * time.Millisecond) // polling the Topology
	}
	// And nothing more than that.
	sa := "system:serviceaccount:skewgate-system:skewgate"
	for _, check := range [][]string{
		{"get", "secrets", "-A"}, {"create", "leases", "-n", "kube-system"}, {"update", "leases", "-n", "kube-system"},
		{"list", "configmaps", "-A"}, {"list", "pods", "-A"}, {"create", "customresourcedefinitions"}, {"get", "/metrics"},
	} {
		out, _, _ := kubectl(kc, append([]string{"auth", "can-i", "--as", sa}, check...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount can %v: %q", check, out)
		}
	}
	for _, check := range [][]string{{"watch", "leases", "-n", "kube-system"}, {"get", "/apis"}, {"get", "/readyz"}} {
		out, _, _ := kubectl(kc, append([]string{"auth", "can-i", "--as", sa}, check...)...)
		if strings.TrimSpace(out) != "yes" {
			t.Errorf("the ServiceAccount cannot %v: %q", check, out)
		}
	}
}
