package app

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

func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

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

func restConfig(o *Options) (*rest.Config, error) {
	if o.Kubeconfig == "" && inCluster() {
		return rest.InClusterConfig()
	}
	if o.Kubeconfig == "" {
		return nil, errors.New("no kubeconfig")
	}
	return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
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
func Start(ctx context.Context, o *Options, lis Listeners, log *zap.Logger) (_ *Server, _ <-chan error, err error) {
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	dcfg := discovery.Config{
		Static: o.static, Policy: discovery.AddressPolicy{CIDRs: o.cidrs}, TrustEndpointSlice: o.TrustEndpointSlice,
		StaleAfter: o.StaleAfter, ProbeInterval: o.ProbeInterval, PollInterval: o.PollInterval, MaxUpstreams: o.MaxUpstreams,
		Logger: log, Registry: reg,
	}
	if o.Kubeconfig != "" || inCluster() {
		rc, err := restConfig(o)
		if err != nil {
			return nil, nil, fmt.Errorf("kubeconfig: %w", err)
		}
		rc.UserAgent = "skewgate"
		reg.MustRegister(clientCertExpiry(rc))
		up := rest.CopyConfig(rc)
		if o.UpstreamCAFile != "" {
			up.TLSClientConfig.CAFile, up.TLSClientConfig.CAData = o.UpstreamCAFile, nil
		}
		dcfg.Upstream = up
		if dcfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, nil, err
		}
		if dcfg.Metadata, err = metadata.NewForConfig(rc); err != nil {
			return nil, nil, err
		}
	}
	ctrl, err := discovery.New(dcfg)
	if err != nil {
		return nil, nil, err
	}
	xs, err := xds.New(g.ctx, xds.Config{Options: o.Envoy, Source: ctrl, Grace: o.Grace, Logger: log, Registry: reg})
	if err != nil {
		return nil, nil, err
	}

	var tlsCreds credentials.TransportCredentials
	var reloader *certs.Reloader
	if o.GRPCCertFile != "" {
		reloader, err = certs.New(certs.Config{CertFile: o.GRPCCertFile, KeyFile: o.GRPCKeyFile, ClientCAFile: o.GRPCClientCAFile, Logger: log, Registry: reg})
		if err != nil {
			return nil, nil, fmt.Errorf("gRPC TLS: %w", err)
		}
		tlsCreds = credentials.NewTLS(reloader.ServerConfig())
	}
	// Both servers admit only the Envoy skewgate configures: the peer's uid on a unix socket, mTLS
	// on TCP (internal/grpcutil/peer.go).
	peers := grpcutil.Peers{PlaintextLoopback: o.GRPCPlaintextLoopback}
	for _, u := range o.GRPCPeerUIDs {
		peers.UIDs = append(peers.UIDs, uint32(u))
	}
	refused := grpcutil.RefusedMetric()
	reg.MustRegister(refused)
	creds := func(server string) grpc.ServerOption {
		return grpc.Creds(grpcutil.NewCredentials(server, peers, tlsCreds, refused, log.Named("grpc")))
	}
	xg := grpc.NewServer(grpcutil.ServerOptions(10000, 16<<20, creds("xds"))...)
	xs.Register(xg)
	eg := extproc.NewGRPCServer(extproc.NewServer(xs, log, reg, extproc.WithClusterGate(xs), extproc.WithContext(g.ctx)), extproc.GRPCOptions{ServerOptions: []grpc.ServerOption{creds("extproc")}})

	for _, l := range []struct {
		lis  *net.Listener
		addr string
	}{{&lis.XDS, o.XDSListen}, {&lis.ExtProc, o.ExtProcListen}, {&lis.HTTP, o.HTTPListen}} {
		if *l.lis == nil {
			if *l.lis, err = listen(l.addr); err != nil {
				return nil, nil, err
			}
		}
	}
	srv := &Server{Discovery: ctrl, XDS: xs, Registry: reg, components: g,
		XDSAddr: lis.XDS.Addr().String(), ExtProcAddr: lis.ExtProc.Addr().String(), HTTPAddr: lis.HTTP.Addr().String()}
	hs := &http.Server{Handler: srv.httpHandler(o.Pprof), ReadHeaderTimeout: 10 * time.Second}

	g.run("discovery", ctrl.Run)
	g.run("xds", xs.Run)
	g.run("xds gRPC", func(ctx context.Context) error { return stopped(ctx, grpcutil.Serve(ctx, xg, lis.XDS, 5*time.Second)) })
	g.run("ext_proc gRPC", func(ctx context.Context) error {
		return stopped(ctx, extproc.Serve(ctx, eg, lis.ExtProc, 10*time.Second))
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
	if reloader != nil {
		g.run("certificate reload", func(ctx context.Context) error { reloader.Run(ctx); return nil })
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
