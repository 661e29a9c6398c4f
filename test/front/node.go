package front

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/kubeadm"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/testbed"
)

// NodeOptions configure one co-located control-plane node (NewNode).
type NodeOptions struct {
	// Dir holds the node's unix sockets, kubeconfigs and certificate. A unix socket path has at most
	// 107 bytes: keep it short.
	Dir string
	// Apiserver names the node's own apiserver in the testbed; it is also the node's hostname.
	Apiserver string
	// Host is the index of the node's front address (tb.HostIP(Host)).
	Host int
	// ProbeInterval is skewgate's and the data plane's health check interval [200ms].
	ProbeInterval time.Duration
	// InformerSwitch puts a Switch (Node.Informers) between skewgate's kubeconfig and the local
	// apiserver: a test can then hold back the informers (Leases, EndpointSlice, CRDs, APIServices),
	// and with them skewgate's first Topology, while the data plane is already connected. Discovery
	// fetches and probes of the static upstream, and the data plane's traffic, do not go through it.
	InformerSwitch bool
	// XDSProtocol is the ADS variant of the data plane (the test data plane's Protocol, for Envoy the
	// bootstrap's api_type) [$SKEWGATE_DATAPLANE_XDS, else delta].
	XDSProtocol dataplane.Protocol
	// ExtraArgs are further `skewgate serve` flags, after the node's own (a mode an install turns on,
	// such as --kubernetes-endpoints).
	ExtraArgs []string
	// Logger is not used: skewgate runs as a process of its own, its log lines go to Logf.
	Logger *zap.Logger
	// Logf receives skewgate's log lines, and what the node does.
	Logf func(string, ...any)
	// Errorf receives what skewgate ended with when Close stopped it, unless it exited 0 (a
	// race-enabled skewgate that found a data race exits 66): t.Errorf [Logf].
	Errorf func(string, ...any)
}

// Node is one control-plane node of the co-located deployment: one skewgate and one data plane
// beside one apiserver. skewgate reads Leases and discovery from the local apiserver only (its
// kubeconfig names nothing else) and has that apiserver as its only static upstream; the data plane
// reaches skewgate's xDS and ext_proc over unix sockets in Dir. Nothing goes through DNS, a Service
// or a front. Each part starts and stops on its own, and starts again on the same socket paths.
//
// skewgate is the built `skewgate serve` binary, a process of its own (Skewgate) with the flags the
// kubeadm install renders (Node.args): a restart is a new process, and the nodes of one test share
// nothing but the host. The data plane is a real Envoy when ENVOY_BIN is set (the bootstrap the kubeadm install renders),
// else the test data plane (test/dataplane) standing in for it.
type Node struct {
	// Name is the local apiserver's name.
	Name         string
	URL, Address string
	ServingCert  testbed.CertPair
	// Informers is set with NodeOptions.InformerSwitch.
	Informers *Switch

	tb                   *testbed.Testbed
	o                    NodeOptions
	xdsSock, extProcSock string
	informers            string // skewgate's kubeconfig

	install kubeadm.Options // the node as `skewgate kubeadm install` sees it
	mu      sync.Mutex
	sg      *Skewgate
	dp      *dataPlaneRun
}

type dataPlaneRun struct {
	seed   uint64
	cancel context.CancelFunc
	ready  chan struct{} // closed when dataplane.Start returned (Envoy: its front port accepts)
	dp     *dataplane.DataPlane
	envoy  *envoyRun
	err    error
}

// NewNode prepares a node for the named apiserver of tb; it starts nothing.
func NewNode(tb *testbed.Testbed, o NodeOptions) (*Node, error) {
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 200 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Errorf == nil {
		o.Errorf = o.Logf
	}
	a, ok := tb.Apiserver(o.Apiserver)
	if !ok {
		return nil, fmt.Errorf("front: no apiserver %q in the testbed", o.Apiserver)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	n := &Node{Name: a.Name, tb: tb, o: o,
		xdsSock: filepath.Join(o.Dir, "xds.sock"), extProcSock: filepath.Join(o.Dir, "extproc.sock")}
	if len(n.extProcSock) > 107 {
		return nil, fmt.Errorf("front: socket path %s is longer than a unix socket path may be (107 bytes): pass a shorter NodeOptions.Dir", n.extProcSock)
	}
	ip := tb.HostIP(o.Host)
	n.Address = net.JoinHostPort(ip.String(), strconv.Itoa(Port))
	n.URL = "https://" + n.Address
	var err error
	if n.ServingCert, err = tb.PKI.IssueServing("front-"+a.Name, ip); err != nil {
		return nil, err
	}
	local := a.URL()
	if o.InformerSwitch {
		if n.Informers, err = NewSwitch(a.Address()); err != nil {
			return nil, err
		}
		local = "https://" + n.Informers.Addr
	}
	if n.install, err = n.layout(); err != nil {
		n.Close()
		return nil, err
	}
	n.informers = filepath.Join(n.install.ConfigDir, "skewgate", "kubeconfig")
	if err := tb.WriteKubeconfig(n.informers, testbed.AdminByToken, map[string]string{"local": local}, "local"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// layout puts the node's files where `skewgate kubeadm install` puts them on a node, with the
// node's Dir as both its --config-dir (under etc/) and its --socket-dir: the kubeconfig at
// etc/skewgate/kubeconfig, the front's certificates and the CA at etc/envoy/ (links to the
// testbed's files).
func (n *Node) layout() (kubeadm.Options, error) {
	a := n.tb.MustApiserver(n.Name)
	io := kubeadm.Options{NodeName: a.Name, APIServerEndpoint: a.Address(), ConfigDir: filepath.Join(n.o.Dir, "etc"), SocketDir: n.o.Dir,
		FrontPort: Port, HTTPListen: "127.0.0.1:0",
		// The testbed's apiservers read X-Remote-Uid (--requestheader-uid-headers).
		ForwardCertificateUID: true,
		AllowedCIDRs:          []string{netip.PrefixFrom(netip.MustParseAddr(a.IP.String()), 24).Masked().String()}}
	links := map[string]string{
		"envoy/apiserver.crt": n.ServingCert.Cert, "envoy/apiserver.key": n.ServingCert.Key, "envoy/ca.crt": n.tb.PKI.CA.Cert,
		"envoy/front-proxy-client.crt": n.tb.PKI.FrontProxyClient.Cert, "envoy/front-proxy-client.key": n.tb.PKI.FrontProxyClient.Key,
	}
	for _, d := range []string{"skewgate", "envoy"} {
		if err := os.MkdirAll(filepath.Join(io.ConfigDir, d), 0o700); err != nil {
			return io, err
		}
	}
	for rel, target := range links {
		if err := os.Symlink(target, filepath.Join(io.ConfigDir, rel)); err != nil {
			return io, err
		}
	}
	return io, nil
}

// args are skewgate's flags on this node: those the kubeadm install renders for its static pod
// (kubeadm.Options.ServeArgs: the local apiserver as its only static upstream, the xDS and ext_proc
// unix sockets, the front's files), then what the testbed needs instead: the front on the node's
// own address rather than every address (the nodes share one host), and the shorter probe and
// health check interval of the tests.
func (n *Node) args() []string {
	args := append(n.install.ServeArgs()[1:],
		"--front-address="+n.tb.HostIP(n.o.Host).String(),
		"--probe-interval="+n.o.ProbeInterval.String(),
		"--health-check-interval="+n.o.ProbeInterval.String())
	return append(args, n.o.ExtraArgs...)
}

// StartSkewgate starts skewgate as a process of its own (the built `skewgate serve`, see
// Skewgate); it returns once its listeners are open, whether or not the local apiserver answers.
func (n *Node) StartSkewgate() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sg != nil {
		return fmt.Errorf("front: skewgate of node %s is already running", n.Name)
	}
	sg, err := startSkewgate("node "+n.Name, filepath.Join(n.o.Dir, "skewgate.log"), n.args(), n.o.Logf)
	if err != nil {
		return err
	}
	n.sg = sg
	return nil
}

// StopSkewgate stops skewgate by SIGTERM and waits until the process exited; it returns nil when
// it exited 0 (a clean shutdown), else what it ended with.
func (n *Node) StopSkewgate() error {
	n.mu.Lock()
	sg := n.sg
	n.sg = nil
	n.mu.Unlock()
	if sg == nil {
		return nil
	}
	return sg.Stop()
}

// KillSkewgate kills skewgate by SIGKILL (no shutdown at all: its streams cut, its sockets left
// behind) and waits until the process is gone; StartSkewgate starts a new one on the same sockets.
func (n *Node) KillSkewgate() error {
	n.mu.Lock()
	sg := n.sg
	n.sg = nil
	n.mu.Unlock()
	if sg == nil {
		return fmt.Errorf("front: skewgate of node %s is not running", n.Name)
	}
	return sg.Kill()
}

// Skewgate is the running skewgate process, nil when stopped.
func (n *Node) Skewgate() *Skewgate {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sg
}

// StartDataPlane starts the data plane and returns at once: until skewgate sends its first
// snapshot the data plane has no listener. WaitDataPlane waits for it. It returns the seed of the
// data plane's random choices ($SKEWGATE_DATAPLANE_SEED, or a random one).
func (n *Node) StartDataPlane() (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dp != nil {
		return 0, fmt.Errorf("front: data plane of node %s is already running", n.Name)
	}
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		ctx, cancel := context.WithCancel(context.Background())
		r := &dataPlaneRun{cancel: cancel, ready: make(chan struct{})}
		e, err := n.startEnvoy(ctx, bin, r.ready, &r.err)
		if err != nil {
			cancel()
			return 0, err
		}
		r.envoy = e
		n.dp = r
		n.o.Logf("node %s: front %s served by Envoy (%s)", n.Name, n.URL, bin)
		return 0, nil
	}
	cfg, err := dataPlaneConfig("unix://"+n.xdsSock, n.o.Logf)
	if err != nil {
		return 0, err
	}
	cfg.NodeID = "node-" + n.Name
	if n.o.XDSProtocol != "" {
		cfg.Protocol = n.o.XDSProtocol
	}
	for cfg.Seed == 0 {
		var b [8]byte
		crand.Read(b[:])
		cfg.Seed = binary.LittleEndian.Uint64(b[:])
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &dataPlaneRun{seed: cfg.Seed, cancel: cancel, ready: make(chan struct{})}
	go func() {
		r.dp, r.err = dataplane.Start(ctx, cfg)
		close(r.ready)
	}()
	n.dp = r
	n.o.Logf("node %s: front %s served by the %s (seed %d); rerun with %s=%d to repeat its random choices",
		n.Name, n.URL, dataplane.Name, cfg.Seed, SeedEnv, cfg.Seed)
	return cfg.Seed, nil
}

// WaitDataPlane waits until the data plane serves its listener (or ctx ends, or it stopped).
func (n *Node) WaitDataPlane(ctx context.Context) error {
	n.mu.Lock()
	r := n.dp
	n.mu.Unlock()
	if r == nil {
		return fmt.Errorf("front: data plane of node %s is not running", n.Name)
	}
	select {
	case <-r.ready:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("front: data plane of node %s has no listener: %w", n.Name, ctx.Err())
	}
}

// StopDataPlane stops the data plane, whether or not it had a listener yet.
func (n *Node) StopDataPlane() {
	n.mu.Lock()
	r := n.dp
	n.dp = nil
	n.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel() // ends a Start still waiting for its listener
	<-r.ready
	if r.dp != nil {
		r.dp.Close()
	}
	if r.envoy != nil {
		r.envoy.stop()
	}
}

// KillDataPlane ends the data plane with no drain of any kind: a real Envoy by SIGKILL; the test data
// plane, which runs inside the test process, by closing its listeners and every open connection at
// once, which is what its clients see of a killed process. It reports which of the two it did.
func (n *Node) KillDataPlane() (string, error) {
	n.mu.Lock()
	r := n.dp
	n.dp = nil
	n.mu.Unlock()
	if r == nil {
		return "", fmt.Errorf("front: data plane of node %s is not running", n.Name)
	}
	if r.envoy != nil {
		r.envoy.kill()
		r.cancel()
		<-r.ready
		return "Envoy killed by SIGKILL", nil
	}
	r.cancel()
	<-r.ready
	if r.dp != nil {
		r.dp.Close()
	}
	return dataplane.Name + " closed (its listener and every connection cut at once)", nil
}

// Kubeconfig writes (once) and returns a kubeconfig for the node's front with the given credential.
func (n *Node) Kubeconfig(c testbed.Credential) string {
	path := filepath.Join(n.o.Dir, "front-"+c.String()+".kubeconfig")
	if _, err := os.Stat(path); err != nil {
		if err := n.tb.WriteKubeconfig(path, c, map[string]string{"front": n.URL}, "front"); err != nil {
			panic(err)
		}
	}
	return path
}

// Close stops the data plane, skewgate and the informer switch.
func (n *Node) Close() {
	n.StopDataPlane()
	if err := n.StopSkewgate(); err != nil {
		n.o.Errorf("%v", err)
	}
	if n.Informers != nil {
		n.Informers.Close()
	}
}
