package front

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/internal/app"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/testbed"
	"github.com/skewgate/skewgate/xds"
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
	Logger      *zap.Logger
	Logf        func(string, ...any)
}

// Node is one control-plane node of the co-located deployment: one skewgate and one data plane
// beside one apiserver. skewgate reads Leases and discovery from the local apiserver only (its
// kubeconfig names nothing else) and has that apiserver as its only static upstream; the data plane
// reaches skewgate's xDS and ext_proc over unix sockets in Dir. Nothing goes through DNS, a Service
// or a front. Each part starts and stops on its own, and starts again on the same socket paths.
//
// The data plane is a real Envoy when ENVOY_BIN is set (the bootstrap the kubeadm install renders),
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

	mu sync.Mutex
	sg *skewgateRun
	dp *dataPlaneRun
}

type skewgateRun struct {
	srv    *app.Server
	cancel context.CancelFunc
	done   <-chan error
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
	n.informers = filepath.Join(o.Dir, "skewgate.kubeconfig")
	if err := tb.WriteKubeconfig(n.informers, testbed.AdminByToken, map[string]string{"local": local}, "local"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// options are skewgate's flags on this node, as the co-located deployment sets them.
func (n *Node) options() (*app.Options, error) {
	a := n.tb.MustApiserver(n.Name)
	opts := app.NewOptions()
	opts.Kubeconfig = n.informers
	opts.UpstreamCAFile = n.tb.PKI.CA.Cert
	opts.StaticUpstreams = []string{a.Name + "=" + a.Address()}
	opts.AllowedCIDRs = []string{netip.PrefixFrom(netip.MustParseAddr(a.IP.String()), 24).Masked().String()}
	opts.ProbeInterval = n.o.ProbeInterval
	opts.XDSListen, opts.ExtProcListen, opts.HTTPListen = "unix://"+n.xdsSock, "unix://"+n.extProcSock, "127.0.0.1:0"
	ip := n.tb.HostIP(n.o.Host)
	opts.Envoy = xds.Options{
		ListenAddress: ip.String(), ListenPort: Port,
		ServingCertFile: n.ServingCert.Cert, ServingKeyFile: n.ServingCert.Key, ClientCAFile: n.tb.PKI.CA.Cert,
		UpstreamCAFile: n.tb.PKI.CA.Cert, FrontProxyCertFile: n.tb.PKI.FrontProxyClient.Cert, FrontProxyKeyFile: n.tb.PKI.FrontProxyClient.Key,
		HealthCheckInterval: n.o.ProbeInterval,
	}
	opts.Complete()
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return opts, nil
}

// StartSkewgate starts skewgate in-process; it returns once its listeners are open, whether or not
// the local apiserver answers.
func (n *Node) StartSkewgate() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sg != nil {
		return fmt.Errorf("front: skewgate of node %s is already running", n.Name)
	}
	opts, err := n.options()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, done, err := app.Start(ctx, opts, app.Listeners{}, n.o.Logger.Named(n.Name))
	if err != nil {
		cancel()
		return fmt.Errorf("front: skewgate of node %s: %w", n.Name, err)
	}
	n.sg = &skewgateRun{srv: srv, cancel: cancel, done: done}
	return nil
}

// StopSkewgate stops skewgate and waits until it has; it returns what skewgate ended with.
func (n *Node) StopSkewgate() error {
	n.mu.Lock()
	r := n.sg
	n.sg = nil
	n.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel()
	return <-r.done
}

// Skewgate is the running skewgate, nil when stopped.
func (n *Node) Skewgate() *app.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sg == nil {
		return nil
	}
	return n.sg.srv
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
	_ = n.StopSkewgate()
	if n.Informers != nil {
		n.Informers.Close()
	}
}
