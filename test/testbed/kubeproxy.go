package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/skewgate/skewgate/test/netns"
)

// KubeProxyUser is the user kube-proxy authenticates as: the bootstrap ClusterRoleBinding
// system:node-proxier grants it exactly what kube-proxy reads (plugin/pkg/auth/authorizer/rbac/
// bootstrappolicy/policy.go), as kubeadm's kube-proxy ServiceAccount is granted.
const KubeProxyUser = "system:kube-proxy"

// KubeProxyOptions describe the real kube-proxy StartKubeProxy runs.
type KubeProxyOptions struct {
	// Version names the binary kube-proxy-<Version>; default NewVersion.
	Version string
	// Node is the Node object kube-proxy runs for (--hostname-override); it is created when missing,
	// with NodeIP as its InternalIP. Default "node-1".
	Node string
	// NodeIP is the node's address: kube-proxy's --bind-address, and where its health and metrics
	// servers listen. Required, inside Config.Network or made local by the caller (netns.HostAddr).
	NodeIP netip.Addr
	// Apiserver is the apiserver kube-proxy watches; default the last one configured.
	Apiserver string
}

// KubeProxy is a running kube-proxy.
type KubeProxy struct {
	Node    string
	LogPath string
	proc    *process
	tb      *Testbed
}

// StartKubeProxy runs kube-proxy in iptables mode for a Node, and waits until the `kubernetes`
// Service's ClusterIP answers through it. It refuses to run outside a network namespace of the test's
// own (test/netns) and outside Network mode: kube-proxy rewrites the nat table of the namespace it
// runs in, and loopback endpoints are refused by validation anyway.
func (tb *Testbed) StartKubeProxy(ctx context.Context, o KubeProxyOptions) (*KubeProxy, error) {
	if netns.Ready() != nil || !tb.cfg.Network.IsValid() {
		return nil, errors.New("testbed: kube-proxy runs only in Network mode inside the test's own network namespace (test/netns)")
	}
	if o.Version == "" {
		o.Version = NewVersion
	}
	if o.Node == "" {
		o.Node = "node-1"
	}
	if !o.NodeIP.Is4() {
		return nil, errors.New("testbed: KubeProxyOptions.NodeIP must be an IPv4 address")
	}
	if o.Apiserver == "" {
		o.Apiserver = tb.order[len(tb.order)-1]
	}
	a, ok := tb.Apiserver(o.Apiserver)
	if !ok {
		return nil, fmt.Errorf("testbed: no apiserver %q", o.Apiserver)
	}
	bin := "kube-proxy-" + o.Version
	if err := checkBinary(tb.cfg.BinDir, bin); err != nil {
		return nil, err
	}
	kubeconfig, err := tb.kubeProxyKubeconfig(a)
	if err != nil {
		return nil, err
	}
	if err := tb.ensureNode(ctx, a, o.Node, o.NodeIP); err != nil {
		return nil, err
	}
	ip := o.NodeIP.String()
	argv := []string{
		filepath.Join(tb.cfg.BinDir, bin),
		"--kubeconfig=" + kubeconfig,
		"--proxy-mode=iptables",
		"--hostname-override=" + o.Node,
		"--bind-address=" + ip,
		"--healthz-bind-address=" + net.JoinHostPort(ip, "10256"),
		"--metrics-bind-address=" + net.JoinHostPort(ip, "10249"),
		// No pods here; the range only tells kube-proxy what "local" traffic is.
		"--cluster-cidr=10.244.0.0/16",
		// Leave the kernel's conntrack settings as they are (0 = as-is).
		// NodePorts on the node address only: no route_localnet sysctl, no warning.
		"--nodeport-addresses=primary",
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--v=2",
	}
	logPath := filepath.Join(tb.cfg.Dir, "logs", "kube-proxy-"+o.Node+".log")
	p, err := startProcess("kube-proxy "+o.Node+" "+o.Version, logPath, argv)
	if err != nil {
		return nil, err
	}
	tb.children.add(p)
	kp := &KubeProxy{Node: o.Node, LogPath: logPath, proc: p, tb: tb}
	tb.cfg.Logf("kube-proxy %s (%s, iptables mode) pid %d for node %s, watching apiserver %s", o.Node, o.Version, p.pid(), o.Node, a.Name)
	hc, err := tb.adminHTTPClient()
	if err != nil {
		return nil, err
	}
	service := "https://" + net.JoinHostPort(KubernetesServiceIP, "443") + "/readyz"
	if err := waitReady(ctx, p, tb.cfg.ReadyTimeout, func() bool {
		resp, err := hc.Get(service)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		kp.Stop()
		return nil, fmt.Errorf("testbed: the kubernetes Service %s through kube-proxy: %w", service, err)
	}
	return kp, nil
}

// Stop ends kube-proxy. Its iptables rules stay until the namespace goes away, as on a real node.
func (kp *KubeProxy) Stop() {
	_ = kp.proc.stop(syscall.SIGTERM, 10*time.Second)
	kp.tb.children.remove(kp.proc)
}

// LogTail returns the last n lines of kube-proxy's log.
func (kp *KubeProxy) LogTail(n int) string { return tailFile(kp.LogPath, n) }

// kubeProxyKubeconfig issues kube-proxy's client certificate and writes its kubeconfig for a.
func (tb *Testbed) kubeProxyKubeconfig(a Apiserver) (string, error) {
	pair, err := tb.PKI.IssueClient(tb.PKI.ca, "kube-proxy", KubeProxyUser)
	if err != nil {
		return "", err
	}
	path := filepath.Join(tb.cfg.Dir, "kube-proxy.kubeconfig")
	return path, tb.writeKubeconfig(path, &clientcmdapi.AuthInfo{ClientCertificate: pair.Cert, ClientKey: pair.Key}, map[string]string{a.Name: a.URL()}, a.Name)
}

// ensureNode creates the Node kube-proxy waits for (a kubelet would register it), with its address.
func (tb *Testbed) ensureNode(ctx context.Context, a Apiserver, name string, ip netip.Addr) error {
	cs, err := kubernetes.NewForConfig(tb.RESTConfig(a.URL(), AdminByToken))
	if err != nil {
		return err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name},
		}},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: create node %s: %w", name, err)
	}
	return nil
}
