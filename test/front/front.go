// Package front runs a complete skewgate front on a testbed for the end-to-end tests and the demo:
// skewgate as a process of its own (the built `skewgate serve`, Skewgate), and as data plane a real Envoy when ENVOY_BIN is set or the
// test data plane (test/dataplane) otherwise. It also runs the control: a plain round-robin TCP
// load balancer over the same apiservers, as an HA control plane without skewgate has.
package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/testbed"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// Port is the front's port (an apiserver's).
const Port = 6443

// Options configure a front.
type Options struct {
	// Dir holds certificates, kubeconfigs and the Envoy bootstrap.
	Dir string
	// Host is the index of the front's address (tb.HostIP(Host)); the round-robin control gets
	// Host+1.
	Host int
	// Informers is the apiserver skewgate's informers talk to [the first apiserver].
	Informers string
	// ProbeInterval is skewgate's and Envoy's health check interval [200ms].
	ProbeInterval time.Duration
	// ExtProcDown points Envoy at an ext_proc address where nothing listens: the front must still
	// strip spoofed headers and fall back to the default route (failure_mode_allow).
	ExtProcDown bool
	// Switches puts a Switch (switch.go) before ext_proc and before xDS: Front.ExtProc and
	// Front.XDS, for tests that stop, hang or restart them under traffic.
	Switches bool
	// MaxConnections is the bootstrap's downstream connection limit [envoyconf default, 50 000].
	MaxConnections int
	// Logger is not used: skewgate runs as a process of its own, its log lines go to Logf.
	Logger *zap.Logger
	// Logf receives skewgate's log lines and what the front does.
	Logf func(string, ...any)
	// Errorf receives what skewgate ended with when Close stopped it, unless it exited 0 (a
	// race-enabled skewgate that found a data race exits 66): t.Errorf [Logf].
	Errorf func(string, ...any)
}

// Front is a running skewgate front.
type Front struct {
	URL, RoundRobinURL string
	Address            string
	// DataPlane says what serves the front: "envoy", or the test data plane standing in for Envoy
	// with the seed of its random choices (dataplane.DataPlane.String).
	DataPlane string
	// ServingCert is the front's certificate; Envoy watches the files (SDS with file paths).
	ServingCert testbed.CertPair
	// Server is the skewgate process (the built `skewgate serve`, see Skewgate).
	Server *Skewgate
	// ExtProc and XDS are set with Options.Switches.
	ExtProc, XDS *Switch
	tb           *testbed.Testbed
	dir          string
	errorf       func(string, ...any)
	closers      []func()
}

// Kubeconfig writes (once) and returns a kubeconfig for the front with the given credential.
func (f *Front) Kubeconfig(c testbed.Credential) string {
	return f.kubeconfig("front-"+c.String(), f.URL, c)
}

// RoundRobinKubeconfig is the same for the plain round-robin control front.
func (f *Front) RoundRobinKubeconfig(c testbed.Credential) string {
	return f.kubeconfig("roundrobin-"+c.String(), f.RoundRobinURL, c)
}

func (f *Front) kubeconfig(name, url string, c testbed.Credential) string {
	path := filepath.Join(f.dir, name+".kubeconfig")
	if _, err := os.Stat(path); err != nil {
		if err := f.tb.WriteKubeconfig(path, c, map[string]string{"front": url}, "front"); err != nil {
			panic(err)
		}
	}
	return path
}

// Start runs skewgate and a data plane in front of every apiserver of tb.
func Start(ctx context.Context, tb *testbed.Testbed, o Options) (*Front, error) {
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
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	ip := tb.HostIP(o.Host)
	serving, err := tb.PKI.IssueServing("front", ip)
	if err != nil {
		return nil, err
	}
	servers := tb.Apiservers()
	if len(servers) == 0 {
		return nil, errors.New("front: the testbed has no apiserver")
	}
	informers := o.Informers
	if informers == "" {
		informers = servers[0].URL()
	}
	kc := filepath.Join(o.Dir, "skewgate.kubeconfig")
	if err := tb.WriteKubeconfig(kc, testbed.AdminByToken, map[string]string{"informers": informers}, "informers"); err != nil {
		return nil, err
	}

	// skewgate's gRPC listeners are unix sockets, as a deployment's: in Dir, or in a shorter
	// directory of the front's own when Dir is too long for a socket path.
	sockDir := o.Dir
	if len(filepath.Join(sockDir, "extproc.sock")) > 107 {
		if sockDir, err = os.MkdirTemp("", "front-"); err != nil {
			return nil, err
		}
	}
	xdsSock, extProcSock := "unix://"+filepath.Join(sockDir, "xds.sock"), "unix://"+filepath.Join(sockDir, "extproc.sock")
	subnet := netip.PrefixFrom(netip.MustParseAddr(servers[0].IP.String()), 24).Masked()
	args := []string{"--kubeconfig=" + kc, "--upstream-ca-file=" + tb.PKI.CA.Cert}
	for _, a := range servers {
		args = append(args, "--static-upstream="+a.Name+"="+a.Address())
	}
	args = append(args, "--allowed-cidr="+subnet.String(), "--probe-interval="+o.ProbeInterval.String(),
		"--xds-listen="+xdsSock, "--extproc-listen="+extProcSock, "--http-listen=127.0.0.1:0",
		"--front-address="+ip.String(), "--front-port="+strconv.Itoa(Port),
		"--front-cert-file="+serving.Cert, "--front-key-file="+serving.Key, "--front-client-ca-file="+tb.PKI.CA.Cert,
		"--envoy-upstream-ca-file="+tb.PKI.CA.Cert, "--front-proxy-cert-file="+tb.PKI.FrontProxyClient.Cert,
		"--front-proxy-key-file="+tb.PKI.FrontProxyClient.Key, "--health-check-interval="+o.ProbeInterval.String(),
		// The testbed's apiservers read X-Remote-Uid (--requestheader-uid-headers).
		"--forward-certificate-uid")
	f := &Front{URL: "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(Port)), Address: net.JoinHostPort(ip.String(), strconv.Itoa(Port)),
		tb: tb, dir: o.Dir, ServingCert: serving, errorf: o.Errorf}
	if sockDir != o.Dir {
		f.closers = append(f.closers, func() { os.RemoveAll(sockDir) })
	}
	switch {
	case o.ExtProcDown:
		args = append(args, "--envoy-extproc-address=unix://"+filepath.Join(sockDir, "no-extproc-here.sock"))
	case o.Switches:
		// The data plane reaches ext_proc over loopback TCP through the Switch, which skewgate has to
		// be told is allowed.
		if f.ExtProc, err = NewSwitch(extProcSock); err != nil {
			f.Close()
			return nil, err
		}
		f.closers = append(f.closers, f.ExtProc.Close)
		args = append(args, "--envoy-extproc-address="+f.ExtProc.Addr, "--grpc-plaintext-loopback")
	}
	if f.Server, err = startSkewgate("front "+f.URL, filepath.Join(o.Dir, "skewgate.log"), args, o.Logf); err != nil {
		f.Close()
		return nil, err
	}
	f.closers = append(f.closers, func() {
		if err := f.Server.Stop(); err != nil {
			f.errorf("%v", err)
		}
	})
	xdsAddr := xdsSock
	if o.Switches && !o.ExtProcDown {
		if f.XDS, err = NewSwitch(xdsSock); err != nil {
			f.Close()
			return nil, err
		}
		f.closers = append(f.closers, f.XDS.Close)
		xdsAddr = f.XDS.Addr
	}

	if envoy := os.Getenv("ENVOY_BIN"); envoy != "" {
		f.DataPlane = "envoy"
		if err := f.startEnvoy(envoy, xdsAddr, o); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		cfg, err := dataPlaneConfig(xdsAddr, o.Logf)
		if err == nil && o.MaxConnections != 0 {
			err = withMaxConnections(&cfg, xdsAddr, o.MaxConnections)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		dp, err := dataplane.Start(ctx, cfg)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.DataPlane = dp.String()
		o.Logf("front %s served by the %s; rerun with %s=%d to repeat its random choices", f.URL, f.DataPlane, SeedEnv, dp.Seed())
		f.closers = append(f.closers, dp.Close)
	}

	rr, err := startRoundRobin(tb.HostIP(o.Host+1), servers)
	if err != nil {
		f.Close()
		return nil, err
	}
	f.RoundRobinURL = "https://" + rr.addr
	f.closers = append(f.closers, rr.close)

	if err := f.waitServing(ctx); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Environment of the test data plane: SeedEnv fixes the seed of its random choices (default: a
// random seed, logged), XDSProtocolEnv selects "delta" (default, as the bootstrap) or "sotw",
// EnvoyVersionEnv the Envoy release it announces (default dataplane.DefaultEnvoyVersion).
const (
	SeedEnv         = "SKEWGATE_DATAPLANE_SEED"
	XDSProtocolEnv  = "SKEWGATE_DATAPLANE_XDS"
	EnvoyVersionEnv = "SKEWGATE_DATAPLANE_ENVOY_VERSION"
)

func dataPlaneConfig(xdsAddr string, logf func(string, ...any)) (dataplane.Config, error) {
	// The bootstrap skewgate renders for this Envoy: the stand-in takes its connection limit from it.
	// The stand-in serves no admin listener; the address only has to pass validation.
	bo := frontBootstrap(xdsAddr)
	bo.AdminAddress = "127.0.0.1:9901"
	b, err := envoyconf.Bootstrap(bo)
	if err != nil {
		return dataplane.Config{}, err
	}
	cfg := dataplane.Config{XDSAddress: xdsAddr, NodeID: "front-1", NodeCluster: "skewgate-front", Logf: logf, Bootstrap: b,
		Protocol: dataplane.Protocol(os.Getenv(XDSProtocolEnv)), EnvoyVersion: os.Getenv(EnvoyVersionEnv)}
	if s := os.Getenv(SeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil || seed == 0 {
			return cfg, fmt.Errorf("%s=%q: want a positive integer", SeedEnv, s)
		}
		cfg.Seed = seed
	}
	return cfg, nil
}

// waitServing polls the front's /readyz until an apiserver answers through it.
func (f *Front) waitServing(ctx context.Context) error {
	// By token: with ext_proc down a certificate user has no identity upstream (see ExtProcDown).
	tc, err := f.tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("front %s (%s) never served /readyz: last %s", f.URL, f.DataPlane, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withMaxConnections gives the stand-in the bootstrap skewgate renders with that connection limit.
func withMaxConnections(cfg *dataplane.Config, xdsAddr string, n int) error {
	bo := frontBootstrap(xdsAddr)
	bo.AdminAddress, bo.MaxConnections = "127.0.0.1:9901", n
	b, err := envoyconf.Bootstrap(bo)
	cfg.Bootstrap = b
	return err
}

// frontBootstrap is the bootstrap of the front's Envoy (or of the stand-in).
func frontBootstrap(xdsAddr string) envoyconf.BootstrapOptions {
	return envoyconf.BootstrapOptions{NodeID: "front-1", NodeCluster: "skewgate-front", XDSAddress: xdsAddr, Delta: true, AdminAddress: "127.0.0.1:0"}
}

// envoyBootstrap is the bootstrap a real Envoy front starts with: the admin API on a socket of the
// front's own (the bootstrap refuses port 0, and a fixed port would collide between fronts).
func envoyBootstrap(dir, xdsAddr string, o Options) envoyconf.BootstrapOptions {
	bo := frontBootstrap(xdsAddr)
	bo.AdminAddress = "unix://" + filepath.Join(dir, "envoy-admin.sock")
	bo.MaxConnections = o.MaxConnections
	return bo
}

func (f *Front) startEnvoy(bin, xdsAddr string, o Options) error {
	bo := envoyBootstrap(f.dir, xdsAddr, o)
	cmd, logf, err := startEnvoyProcess(bin, f.dir, bo,
		"--base-id", strconv.Itoa(o.Host*100+os.Getpid()%100))
	if err != nil {
		return err
	}
	f.closers = append(f.closers, func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	return nil
}

// Close stops the data plane, the control and skewgate (by SIGTERM; an unclean end goes to
// Options.Errorf).
func (f *Front) Close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
}
