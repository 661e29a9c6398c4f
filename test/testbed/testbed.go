package testbed

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Versions the testbed knows by default. Adding a version is one line in the Makefile
// (APISERVER_VERSIONS); these name the default topology.
const (
	OldVersion  = "v1.35.4"
	NewVersion  = "v1.36.3"
	EtcdVersion = "v3.6.8"

	// APIServerPort is the secure port of every apiserver; each has its own loopback address.
	APIServerPort = 6443

	// ServiceCIDR is every apiserver's --service-cluster-ip-range; KubernetesServiceIP is its first
	// address, the ClusterIP of the `default/kubernetes` Service, a SAN of every serving certificate.
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
)

// ApiserverSpec describes one apiserver to run.
type ApiserverSpec struct {
	// Name is also the hostname inside its UTS namespace, so it determines the identity Lease.
	Name    string
	Version string
	// NoAnonymous starts the apiserver with --anonymous-auth=false: a request without credentials
	// gets 401 on every path instead of being system:anonymous.
	NoAnonymous bool
	ExtraFlags  []string
}

// Config describes a testbed.
type Config struct {
	// Dir holds certificates, etcd data and logs. Required.
	Dir string
	// BinDir holds kube-apiserver-<version> and etcd-<version>; default: FindBinDir().
	BinDir string
	// Apiservers to start; default DefaultApiservers().
	Apiservers []ApiserverSpec
	// PeerProxy turns the in-tree Mixed Version Proxy on for every apiserver (feature gate,
	// --peer-ca-file), for comparison benchmarks.
	PeerProxy bool
	// ReadyTimeout bounds the wait for each process to become ready; default 2 minutes.
	ReadyTimeout time.Duration
	// Logf reports progress; nil is quiet.
	Logf func(format string, args ...any)
	// Subnet fixes the loopback /24 (127.Subnet[0].Subnet[1].0/24); zero picks one at random.
	Subnet [2]byte
	// Network, when set, is a non-loopback IPv4 /24 the caller made local (test/netns does, inside a
	// network namespace of its own): etcd and the apiservers bind and advertise there instead of on
	// loopback, and the apiservers run the default lease endpoint reconciler, so `default/kubernetes`
	// Endpoints and EndpointSlice hold their real addresses as in a real cluster (validation refuses
	// loopback ones). An apiserver's ExtraFlags may still set --endpoint-reconciler-type.
	Network netip.Prefix
}

// DefaultApiservers is the skewed pair every scenario starts from: "old" is v1.35.4 with its
// default feature gates (no Mixed Version Proxy, no peer-advertise-address annotation), "new" is
// v1.36.3 with its defaults.
func DefaultApiservers() []ApiserverSpec {
	return []ApiserverSpec{{Name: "old", Version: OldVersion}, {Name: "new", Version: NewVersion}}
}

// Apiserver is a snapshot of one apiserver's identity and address.
type Apiserver struct {
	Name    string
	Version string
	IP      net.IP
	Port    int
	Serving CertPair
	LogPath string
	PID     int // 0 when stopped
}

// Address is host:port.
func (a Apiserver) Address() string { return net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port)) }

// URL is the https URL of the apiserver.
func (a Apiserver) URL() string { return "https://" + a.Address() }

type apiserver struct {
	Apiserver
	noAnonymous bool
	extraFlags  []string
	proc        *process
}

// Testbed is a running etcd and its apiservers.
type Testbed struct {
	cfg      Config
	PKI      *PKI
	base     [3]byte // 127.A.B.0/24 owned by this testbed
	EtcdURL  string
	etcd     *process
	children registry

	mu      sync.Mutex
	servers map[string]*apiserver
	order   []string
}

// Start generates the PKI, starts etcd and every apiserver, and waits until all are ready. On error
// everything already started is stopped.
func Start(ctx context.Context, cfg Config) (*Testbed, error) {
	if err := preflight(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("testbed: Config.Dir is required")
	}
	if cfg.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	if cfg.Apiservers == nil {
		cfg.Apiservers = DefaultApiservers()
	}
	if len(cfg.Apiservers) > 200 {
		return nil, errors.New("testbed: at most 200 apiservers")
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	for _, s := range cfg.Apiservers {
		if err := checkBinary(cfg.BinDir, "kube-apiserver-"+s.Version); err != nil {
			return nil, err
		}
	}
	if err := checkBinary(cfg.BinDir, "etcd-"+EtcdVersion); err != nil {
		return nil, err
	}
	pki, err := NewPKI(filepath.Join(cfg.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("testbed: pki: %w", err)
	}
	tb := &Testbed{cfg: cfg, PKI: pki, servers: map[string]*apiserver{}}
	tb.base = randomSubnet()
	if cfg.Subnet != [2]byte{} {
		tb.base = [3]byte{127, cfg.Subnet[0], cfg.Subnet[1]}
	}
	if cfg.Network.IsValid() {
		if tb.base, err = networkBase(cfg.Network); err != nil {
			return nil, err
		}
	}
	for i, s := range cfg.Apiservers {
		if s.Name == "" || tb.servers[s.Name] != nil {
			return nil, fmt.Errorf("testbed: apiserver names must be unique and non-empty, got %q", s.Name)
		}
		a := &apiserver{Apiserver: Apiserver{Name: s.Name, Version: s.Version, IP: tb.ip(i + 1), Port: APIServerPort}, extraFlags: s.ExtraFlags}
		a.noAnonymous = s.NoAnonymous
		if a.Serving, err = pki.IssueServing("serving-"+s.Name, a.IP); err != nil {
			return nil, err
		}
		a.LogPath = filepath.Join(cfg.Dir, "logs", s.Name+".log")
		tb.servers[s.Name] = a
		tb.order = append(tb.order, s.Name)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if err := tb.startEtcd(ctx); err != nil {
		tb.Close()
		return nil, err
	}
	// Apiservers start in parallel: each spends ~2.5 s bootstrapping before /readyz.
	errs := make([]error, len(tb.order))
	var wg sync.WaitGroup
	for i, name := range tb.order {
		wg.Go(func() { errs[i] = tb.Start(ctx, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Close()
		return nil, err
	}
	if err := tb.writeKubeconfigs(); err != nil {
		tb.Close()
		return nil, err
	}
	return tb, nil
}

func preflight() error {
	if runtime.GOOS != "linux" {
		return errors.New("testbed: needs Linux (UTS namespaces)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return errors.New("testbed: unshare not found on PATH (install util-linux); each apiserver needs its own UTS namespace")
	}
	return nil
}

func checkBinary(dir, name string) error {
	path := filepath.Join(dir, name)
	if st, err := os.Stat(path); err != nil || st.Mode()&0o111 == 0 {
		return fmt.Errorf("testbed: %s is missing: run `make testbed-bins` (or set SKEWGATE_TESTBED_BIN)", path)
	}
	return nil
}

// FindBinDir returns $SKEWGATE_TESTBED_BIN, or .testbed/bin in the nearest parent folder that has a
// go.mod.
func FindBinDir() (string, error) {
	if dir := os.Getenv("SKEWGATE_TESTBED_BIN"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack", "testbed-bins.sh")); err == nil {
				return filepath.Join(dir, ".testbed", "bin"), nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testbed: cannot find the repository's .testbed/bin; set SKEWGATE_TESTBED_BIN")
		}
		dir = parent
	}
}

// randomSubnet picks 127.A.B.0/24 so that concurrent testbeds (parallel test packages) do not
// collide; a collision would show as "address already in use", never as a silent shared server.
func randomSubnet() [3]byte {
	n, _ := rand.Int(rand.Reader, big.NewInt(240*256))
	v := int(n.Int64())
	return [3]byte{127, byte(10 + v/256), byte(v % 256)}
}

// networkBase checks Config.Network: an IPv4 /24, not loopback, link-local or unspecified (the
// addresses the apiserver's endpoint validation refuses).
func networkBase(p netip.Prefix) ([3]byte, error) {
	a := p.Masked().Addr()
	if !a.Is4() || p.Bits() != 24 || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
		return [3]byte{}, fmt.Errorf("testbed: Config.Network must be a non-loopback IPv4 /24, got %s", p)
	}
	b := a.As4()
	return [3]byte{b[0], b[1], b[2]}, nil
}

func (tb *Testbed) ip(host int) net.IP {
	return net.IPv4(tb.base[0], tb.base[1], tb.base[2], byte(host)).To4()
}

// HostIP returns an address in the testbed's /24 (loopback unless Config.Network is set) that no apiserver uses (hosts 201-249),
// for servers a test adds beside the apiservers.
func (tb *Testbed) HostIP(n int) net.IP {
	if n < 0 || n > 48 {
		panic("testbed: HostIP takes 0..48")
	}
	return tb.ip(201 + n)
}

func (tb *Testbed) startEtcd(ctx context.Context) error {
	ip := tb.ip(250).String()
	client := "http://" + net.JoinHostPort(ip, "2379")
	peer := "http://" + net.JoinHostPort(ip, "2380")
	argv := []string{
		filepath.Join(tb.cfg.BinDir, "etcd-"+EtcdVersion),
		"--name=testbed",
		"--data-dir=" + filepath.Join(tb.cfg.Dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testbed=" + peer,
		"--unsafe-no-fsync", // test data only; saves seconds per run on slow disks
		"--log-level=warn",
	}
	p, err := startProcess("etcd", filepath.Join(tb.cfg.Dir, "logs", "etcd.log"), argv)
	if err != nil {
		return err
	}
	tb.children.add(p)
	tb.etcd = p
	tb.EtcdURL = client
	tb.cfg.Logf("etcd pid %d at %s", p.pid(), client)
	hc := &http.Client{Timeout: 2 * time.Second}
	return waitReady(ctx, p, tb.cfg.ReadyTimeout, func() bool {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// waitReady polls ready until it is true, the process exits, or the timeout passes.
func waitReady(ctx context.Context, p *process, timeout time.Duration, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (%v); last lines of %s:\n%s", p.name, timeout, ctx.Err(), p.logPath, p.logTail(40))
		case <-tick.C:
		}
	}
}

func (tb *Testbed) apiserverArgs(a *apiserver) []string {
	p := tb.PKI
	args := []string{
		filepath.Join(tb.cfg.BinDir, "kube-apiserver-"+a.Version),
		"--advertise-address=" + a.IP.String(),
		"--bind-address=" + a.IP.String(),
		"--secure-port=" + strconv.Itoa(a.Port),
		"--etcd-servers=" + tb.EtcdURL,
		"--tls-cert-file=" + a.Serving.Cert, "--tls-private-key-file=" + a.Serving.Key,
		"--client-ca-file=" + p.CA.Cert,
		"--token-auth-file=" + p.TokenFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-account-issuer=https://" + ServingSNI,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--requestheader-client-ca-file=" + p.FrontProxyCA.Cert,
		"--requestheader-allowed-names=" + FrontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.FrontProxyClient.Cert, "--proxy-client-key-file=" + p.FrontProxyClient.Key,
		"--profiling=false",
		"--v=1",
	}
	if !tb.cfg.Network.IsValid() {
		// The default "lease" reconciler refuses loopback advertise addresses.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if tb.cfg.PeerProxy {
		args = append(args, "--feature-gates=UnknownVersionInteroperabilityProxy=true", "--peer-ca-file="+p.CA.Cert)
	}
	if a.noAnonymous {
		args = append(args, "--anonymous-auth=false")
	}
	args = append(args, a.extraFlags...)
	// unshare(1) execs the shell in a new UTS namespace; the shell sets the hostname (which names the
	// identity Lease) and execs the apiserver, so the PID we hold is the apiserver's.
	ns := []string{"unshare", "--uts"}
	if os.Geteuid() != 0 {
		ns = []string{"unshare", "--user", "--map-root-user", "--uts"}
	}
	return append(append(ns, "sh", "-c", `hostname "$0" && exec "$@"`, a.Name), args...)
}

// Start starts the named apiserver (again) and waits for its /readyz.
func (tb *Testbed) Start(ctx context.Context, name string) error {
	tb.mu.Lock()
	a := tb.servers[name]
	if a == nil {
		tb.mu.Unlock()
		return fmt.Errorf("testbed: no apiserver %q", name)
	}
	if a.proc != nil && !a.proc.exited() {
		tb.mu.Unlock()
		return fmt.Errorf("testbed: apiserver %q is already running", name)
	}
	argv := tb.apiserverArgs(a)
	p, err := startProcess("kube-apiserver "+name+" "+a.Version, a.LogPath, argv)
	if err != nil {
		tb.mu.Unlock()
		return err
	}
	a.proc = p
	a.PID = p.pid()
	tb.children.add(p)
	snap := a.Apiserver
	tb.mu.Unlock()
	tb.cfg.Logf("apiserver %s (%s) pid %d at %s", name, snap.Version, snap.PID, snap.URL())
	hc, err := tb.adminHTTPClient()
	if err != nil {
		return err
	}
	return waitReady(ctx, p, tb.cfg.ReadyTimeout, func() bool {
		resp, err := hc.Get(snap.URL() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Stop sends SIGTERM to the named apiserver and waits for it to exit (a clean shutdown: 1.36
// deletes its identity Lease).
func (tb *Testbed) Stop(name string) error { return tb.halt(name, syscall.SIGTERM) }

// Kill sends SIGKILL to the named apiserver: it leaves its identity Lease behind.
func (tb *Testbed) Kill(name string) error { return tb.halt(name, syscall.SIGKILL) }

func (tb *Testbed) halt(name string, sig syscall.Signal) error {
	tb.mu.Lock()
	a := tb.servers[name]
	if a == nil {
		tb.mu.Unlock()
		return fmt.Errorf("testbed: no apiserver %q", name)
	}
	p := a.proc
	a.PID = 0
	tb.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.stop(sig, 60*time.Second)
	tb.children.remove(p)
	return err
}

// Replace stops the named apiserver and starts the given version in its place: same name (so same
// hostname and identity Lease name), address and certificates, as an in-place node upgrade does.
func (tb *Testbed) Replace(ctx context.Context, name, version string) error {
	if err := checkBinary(tb.cfg.BinDir, "kube-apiserver-"+version); err != nil {
		return err
	}
	if err := tb.Stop(name); err != nil {
		return err
	}
	tb.mu.Lock()
	tb.servers[name].Version = version
	tb.mu.Unlock()
	return tb.Start(ctx, name)
}

// Apiserver returns a snapshot of the named apiserver; ok is false if there is none.
func (tb *Testbed) Apiserver(name string) (Apiserver, bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	a := tb.servers[name]
	if a == nil {
		return Apiserver{}, false
	}
	return a.Apiserver, true
}

// Apiservers returns snapshots of all apiservers in configuration order.
func (tb *Testbed) Apiservers() []Apiserver {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	out := make([]Apiserver, 0, len(tb.order))
	for _, n := range tb.order {
		out = append(out, tb.servers[n].Apiserver)
	}
	return out
}

// MustApiserver is Apiserver for names a test knows exist.
func (tb *Testbed) MustApiserver(name string) Apiserver {
	a, ok := tb.Apiserver(name)
	if !ok {
		panic("testbed: no apiserver " + name)
	}
	return a
}

// LogTail returns the last n lines of the named process's log ("etcd" or an apiserver name).
func (tb *Testbed) LogTail(name string, n int) string {
	if name == "etcd" {
		return tailFile(filepath.Join(tb.cfg.Dir, "logs", "etcd.log"), n)
	}
	a, ok := tb.Apiserver(name)
	if !ok {
		return ""
	}
	return tailFile(a.LogPath, n)
}

// Close stops every process the testbed started, apiservers first, then etcd.
func (tb *Testbed) Close() {
	procs := tb.children.all()
	var wg sync.WaitGroup
	for _, p := range procs {
		if p == tb.etcd {
			continue // last, so the apiservers can shut down cleanly
		}
		wg.Go(func() { _ = p.stop(syscall.SIGTERM, 10*time.Second) })
	}
	wg.Wait()
	if tb.etcd != nil {
		_ = tb.etcd.stop(syscall.SIGTERM, 10*time.Second)
	}
	for _, p := range procs {
		tb.children.remove(p)
	}
}

// TLSConfig returns a client TLS config that verifies apiservers against the cluster CA with SNI
// kubernetes.default.svc and presents the given client certificate (may be empty).
func (tb *Testbed) TLSConfig(client CertPair) (*tls.Config, error) {
	caPEM, err := os.ReadFile(tb.PKI.CA.Cert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: ServingSNI, MinVersion: tls.VersionTLS12}
	if client.Cert != "" {
		c, err := tls.LoadX509KeyPair(client.Cert, client.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

func (tb *Testbed) adminHTTPClient() (*http.Client, error) {
	cfg, err := tb.TLSConfig(tb.PKI.Admin)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// AdminHTTPClient returns an HTTP client authenticated as the admin by client certificate.
func (tb *Testbed) AdminHTTPClient() (*http.Client, error) { return tb.adminHTTPClient() }
