package incluster

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/front"
)

// memberNamespace holds the member Leases of the kubernetes-endpoints mode; the admin creates it,
// as `skewgate kubeadm rbac --kubernetes-endpoints` renders it.
const memberNamespace = "skewgate"

// frontNode is one co-located control-plane node: its apiserver, and beside it skewgate and a data
// plane serving the front on the node's own address in the namespace's /24.
type frontNode struct {
	*front.Node
	// IP is the front's address, the endpoint the node publishes.
	IP string
}

// dataPlaneName says what serves the fronts: Envoy when ENVOY_BIN is set, else the test data plane
// standing in for it.
func dataPlaneName() string {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return "Envoy (" + bin + "), one per node"
	}
	return dataplane.Name + " (ENVOY_BIN unset), one per node"
}

// startFrontNodes starts one node per apiserver, each skewgate in the kubernetes-endpoints mode
// with the given member TTL, and waits until every data plane serves its front. It returns the
// nodes and when their skewgates were started.
func (c *cluster) startFrontNodes(t *testing.T, ttl time.Duration) ([]*frontNode, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memberNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var nodes []*frontNode
	// Every member checks every other one: each front's address is admitted by every skewgate.
	var frontCIDRs []string
	for i := range c.tb.Apiservers() {
		frontCIDRs = append(frontCIDRs, "--kubernetes-endpoints-cidr="+netip.PrefixFrom(netip.MustParseAddr(c.tb.HostIP(10+i).String()), 32).String())
	}
	for i, a := range c.tb.Apiservers() {
		ip := c.tb.HostIP(10 + i).String()
		// The flags `skewgate kubeadm install --kubernetes-endpoints` renders (kubeadm.Options
		// KubernetesEndpoints), with the front's own address: on a real node the front listens on the
		// apiserver's advertise address, here on an address of its own beside it, which
		// --kubernetes-endpoints-cidr admits as that apiserver's member (the node's --allowed-cidr,
		// which the mode requires, is the apiservers' /24 already).
		args := append([]string{"--kubernetes-endpoints", "--kubernetes-endpoint-address=" + ip, "--kubernetes-endpoints-member=" + a.Name,
			"--kubernetes-endpoints-ttl=" + ttl.String()}, frontCIDRs...)
		n, err := front.NewNode(c.tb, front.NodeOptions{Dir: t.TempDir(), Apiserver: a.Name, Host: 10 + i, Logf: t.Logf, Errorf: t.Errorf, ExtraArgs: args})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		nodes = append(nodes, &frontNode{Node: n, IP: ip})
	}
	if _, err := front.SkewgateBinary(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	for _, n := range nodes {
		n.start(ctx, t)
		t.Logf("part: node %s: skewgate (built `skewgate serve`, kubernetes-endpoints mode, member Lease %s/%s, TTL %v) and %s serving the front %s with a certificate for %s and %s",
			n.Name, memberNamespace, n.Name, ttl, dataPlaneName(), n.URL, "kubernetes.default.svc", "10.96.0.1")
	}
	return nodes, started
}

// start starts the node's skewgate and data plane and waits until the data plane serves.
func (n *frontNode) start(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := n.StartSkewgate(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartDataPlane(); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitDataPlane(ctx); err != nil {
		t.Fatal(err)
	}
}

// frontIPs lists the nodes' front addresses, sorted.
func frontIPs(nodes ...*frontNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.IP)
	}
	slices.Sort(out)
	return out
}

// tally counts what skewed lists met.
type tally struct {
	Served   int `json:"served"`
	Wrong404 int `json:"wrong_404"`
	// ConnErrors: the connection was refused, reset or closed before an answer (a dead front).
	ConnErrors int `json:"connection_errors"`
	Other      int `json:"other_failures"`
}

func (t tally) total() int { return t.Served + t.Wrong404 + t.ConnErrors + t.Other }

// list makes one skewed list (a new connection: connectionPerRequest) and counts its outcome.
func (t *tally) list(ctx context.Context, tb testing.TB, cs kubernetes.Interface) {
	_, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		t.Served++
	case apierrors.IsNotFound(err):
		t.Wrong404++
	case utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err):
		t.ConnErrors++
	default:
		t.Other++
		tb.Logf("skewed list: %v", err)
	}
}

// lists makes n skewed lists.
func lists(ctx context.Context, tb testing.TB, cs kubernetes.Interface, n int) tally {
	var t tally
	for range n {
		t.list(ctx, tb, cs)
	}
	return t
}

// dnatTargets lists the endpoints kube-proxy's iptables rules send the kubernetes ClusterIP to
// (the --to-destination of the nat table's DNAT rules for port 6443), sorted: what kube-proxy has
// programmed, read from the kernel's tables rather than from kube-proxy.
func dnatTargets(port int) ([]string, error) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return nil, fmt.Errorf("iptables-save: %w", err)
	}
	set := map[string]bool{}
	suffix := ":" + strconv.Itoa(port)
	for _, line := range strings.Split(string(out), "\n") {
		_, dest, ok := strings.Cut(line, "--to-destination ")
		if !ok || !strings.Contains(line, "-j DNAT") {
			continue
		}
		dest = strings.Fields(dest)[0]
		if ip, ok := strings.CutSuffix(dest, suffix); ok {
			set[ip] = true
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// waitDNAT waits until kube-proxy programs exactly ips on port 6443 (the apiservers' and the fronts'),
// and returns when.
func waitDNAT(ctx context.Context, ips []string) (time.Time, error) {
	var got []string
	for {
		var err error
		if got, err = dnatTargets(front.Port); err != nil {
			return time.Time{}, err
		}
		if slices.Equal(got, ips) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("kube-proxy never programmed exactly %v: last %v: %w", ips, got, ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling the nat table: kube-proxy announces nothing
		}
	}
}

// metricSum is the sum of the series of the named metric in reg whose labels include every pair
// of match; 0 if there is none.
func metricSum(t *testing.T, reg prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k, v := range match {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// nodesMetric sums metricSum over the running skewgates of nodes.
func nodesMetric(t *testing.T, nodes []*frontNode, name string, match map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, n := range nodes {
		if sg := n.Skewgate(); sg != nil {
			sum += metricSum(t, sg.Registry, name, match)
		}
	}
	return sum
}

// secs is d in seconds with millisecond precision, for the artifact.
func secs(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
