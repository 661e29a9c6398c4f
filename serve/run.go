package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/extproc"
	"github.com/skewgate/skewgate/internal/certs"
	"github.com/skewgate/skewgate/internal/grpcutil"
	"github.com/skewgate/skewgate/kubesvc"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds"
)

// Listeners may hold listeners the caller opened (tests); nil ones are opened from the Options.
type Listeners struct {
	XDS, ExtProc, HTTP net.Listener
}

// Server is a running control plane.
type Server struct {
	Discovery *discovery.Controller
	XDS       *xds.Server
	Registry  *prometheus.Registry
	// Addresses actually listened on.
	XDSAddr, ExtProcAddr, HTTPAddr string

	components *group
}

// NewLogger builds the zap logger the options ask for.
func NewLogger(format, level string) (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
	}
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg.Level = lvl
	return cfg.Build()
}

func restConfig(o *options.Options) (*rest.Config, error) {
	if o.Kubeconfig == "" && options.InCluster() {
		return rest.InClusterConfig()
	}
	if o.Kubeconfig == "" {
		return nil, errors.New("no kubeconfig")
	}
	return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
}

// staticUpstreams converts the parsed --static-upstream flags into discovery's type.
func staticUpstreams(in []options.StaticUpstream) []discovery.StaticUpstream {
	out := make([]discovery.StaticUpstream, 0, len(in))
	for _, u := range in {
		out = append(out, discovery.StaticUpstream{Name: u.Name, Address: u.Address})
	}
	return out
}

// listen opens host:port or unix:///path (replacing a stale socket file; a missing directory is
// created 0700, as `skewgate kubeadm install` creates it).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// stopped drops grpc.ErrServerStopped during shutdown: Serve returns it when the stop came before it
// started serving, which is no failure.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Start builds everything and starts serving; it returns once listeners are open. The channel
// delivers nil after ctx ends and every component stopped, or the error of the first component that
// failed: that ends the others too (see group).
func Start(ctx context.Context, o *options.Options, lis Listeners, log *zap.Logger) (_ *Server, _ <-chan error, err error) {
	g := newGroup(ctx)
	defer func() {
		if err != nil {
			g.cancel(err)
			for _, l := range []net.Listener{lis.XDS, lis.ExtProc, lis.HTTP} {
				if l != nil {
					l.Close()
				}
			}
		}
	}()
	reg := newRegistry()
	dcfg, err := discoveryConfig(o, log, reg)
	if err != nil {
		return nil, nil, err
	}
	ctrl, err := discovery.New(dcfg)
	if err != nil {
		return nil, nil, err
	}
	ksvc, err := kubernetesEndpoints(o, dcfg, ctrl, log, kubesvc.NewMetrics(reg))
	if err != nil {
		return nil, nil, err
	}
	xs, err := xds.New(g.ctx, xds.Config{Options: o.Envoy, Source: ctrl, Grace: o.Grace, Logger: log, Registry: reg})
	if err != nil {
		return nil, nil, err
	}
	gs, err := newGRPCServers(g.ctx, o, xs, log, reg)
	if err != nil {
		return nil, nil, err
	}
	if err := openListeners(&lis, o); err != nil {
		return nil, nil, err
	}
	srv := &Server{Discovery: ctrl, XDS: xs, Registry: reg, components: g,
		XDSAddr: lis.XDS.Addr().String(), ExtProcAddr: lis.ExtProc.Addr().String(), HTTPAddr: lis.HTTP.Addr().String()}
	srv.runComponents(g, gs, lis, o.Pprof)
	if ksvc != nil {
		// On shutdown it removes this node's front from the Service before it returns (kubesvc.Shutdown).
		g.run("kubernetes endpoints", ksvc.Run)
	}
	done := make(chan error, 1)
	go func() {
		err := g.wait()
		if err != nil {
			log.Error("a component stopped; shutting down", zap.Error(err))
		}
		done <- err
	}()
	log.Info("serving", zap.String("xds", srv.XDSAddr), zap.String("extproc", srv.ExtProcAddr), zap.String("http", srv.HTTPAddr))
	return srv, done, nil
}

// newRegistry is the process's metrics registry, with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// discoveryConfig is discovery's configuration from the options, with the clients of the kubeconfig
// (or the in-cluster config) when there is one.
func discoveryConfig(o *options.Options, log *zap.Logger, reg *prometheus.Registry) (discovery.Config, error) {
	dcfg := discovery.Config{
		Static: staticUpstreams(o.Static()), Policy: discovery.AddressPolicy{CIDRs: o.CIDRs()}, TrustEndpointSlice: o.TrustEndpointSlice,
		StaleAfter: o.StaleAfter, ProbeInterval: o.ProbeInterval, PollInterval: o.PollInterval, MaxUpstreams: o.MaxUpstreams,
		Logger: log, Registry: reg,
	}
	if o.Kubeconfig == "" && !options.InCluster() {
		return dcfg, nil
	}
	rc, err := restConfig(o)
	if err != nil {
		return dcfg, fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = "skewgate"
	reg.MustRegister(clientCertExpiry(rc))
	up := rest.CopyConfig(rc)
	if o.UpstreamCAFile != "" {
		up.TLSClientConfig.CAFile, up.TLSClientConfig.CAData = o.UpstreamCAFile, nil
	}
	dcfg.Upstream = up
	if dcfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return dcfg, err
	}
	if dcfg.Metadata, err = metadata.NewForConfig(rc); err != nil {
		return dcfg, err
	}
	return dcfg, nil
}

// grpcServers are the xDS and ext_proc gRPC servers, and the reloader of their certificate (nil
// without --grpc-cert-file).
type grpcServers struct {
	xds, extproc *grpc.Server
	reloader     *certs.Reloader
}

// newGRPCServers builds both gRPC servers. Both admit only the Envoy skewgate configures: the peer's
// uid on a unix socket, mTLS on TCP (internal/grpcutil/peer.go). ext_proc reads only xs: the
// Topology every connected Envoy has acknowledged. ext_proc's background work ends with ctx.
func newGRPCServers(ctx context.Context, o *options.Options, xs *xds.Server, log *zap.Logger, reg *prometheus.Registry) (grpcServers, error) {
	var gs grpcServers
	var tlsCreds credentials.TransportCredentials
	if o.GRPCCertFile != "" {
		var err error
		gs.reloader, err = certs.New(certs.Config{CertFile: o.GRPCCertFile, KeyFile: o.GRPCKeyFile, ClientCAFile: o.GRPCClientCAFile, Logger: log, Registry: reg})
		if err != nil {
			return gs, fmt.Errorf("gRPC TLS: %w", err)
		}
		tlsCreds = credentials.NewTLS(gs.reloader.ServerConfig())
	}
	peers := grpcutil.Peers{PlaintextLoopback: o.GRPCPlaintextLoopback}
	for _, u := range o.GRPCPeerUIDs {
		peers.UIDs = append(peers.UIDs, uint32(u))
	}
	refused := grpcutil.RefusedMetric()
	reg.MustRegister(refused)
	creds := func(server string) grpc.ServerOption {
		return grpc.Creds(grpcutil.NewCredentials(server, peers, tlsCreds, refused, log.Named("grpc")))
	}
	gs.xds = grpc.NewServer(grpcutil.ServerOptions(10000, 16<<20, creds("xds"))...)
	xs.Register(gs.xds)
	gs.extproc = extproc.NewGRPCServer(extproc.NewServer(xs, log, reg, extproc.WithContext(ctx)), extproc.GRPCOptions{ServerOptions: []grpc.ServerOption{creds("extproc")}})
	return gs, nil
}

// openListeners opens the listeners the caller did not pass.
func openListeners(lis *Listeners, o *options.Options) error {
	for _, l := range []struct {
		lis  *net.Listener
		addr string
	}{{&lis.XDS, o.XDSListen}, {&lis.ExtProc, o.ExtProcListen}, {&lis.HTTP, o.HTTPListen}} {
		if *l.lis == nil {
			var err error
			if *l.lis, err = listen(l.addr); err != nil {
				return err
			}
		}
	}
	return nil
}

// runComponents starts every component in g: discovery, xDS, both gRPC servers, HTTP and the
// certificate reloader.
func (s *Server) runComponents(g *group, gs grpcServers, lis Listeners, pprof bool) {
	hs := &http.Server{Handler: s.httpHandler(pprof), ReadHeaderTimeout: 10 * time.Second}
	g.run("discovery", s.Discovery.Run)
	g.run("xds", s.XDS.Run)
	g.run("xds gRPC", func(ctx context.Context) error {
		return stopped(ctx, grpcutil.Serve(ctx, gs.xds, lis.XDS, 5*time.Second))
	})
	g.run("ext_proc gRPC", func(ctx context.Context) error {
		return stopped(ctx, extproc.Serve(ctx, gs.extproc, lis.ExtProc, 10*time.Second))
	})
	g.run("http", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(sctx)
		}()
		return hs.Serve(lis.HTTP)
	})
	if gs.reloader != nil {
		g.run("certificate reload", func(ctx context.Context) error { gs.reloader.Run(ctx); return nil })
	}
}
