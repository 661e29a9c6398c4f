package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// listen opens host:port or unix:///path (replacing a stale socket file).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// Start builds everything and starts serving; it returns once listeners are open. Run blocks.
func Start(ctx context.Context, o *Options, lis Listeners, log *zap.Logger) (*Server, <-chan error, error) {
	if o.GCPercent > 0 {
		debug.SetGCPercent(o.GCPercent)
	}
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
	xs, err := xds.New(ctx, xds.Config{Options: o.Envoy, Source: ctrl, Grace: o.Grace, Logger: log, Registry: reg})
	if err != nil {
		return nil, nil, err
	}

	var creds []grpc.ServerOption
	var reloader *certs.Reloader
	if o.GRPCCertFile != "" {
		reloader, err = certs.New(certs.Config{CertFile: o.GRPCCertFile, KeyFile: o.GRPCKeyFile, ClientCAFile: o.GRPCClientCAFile, Logger: log, Registry: reg})
		if err != nil {
			return nil, nil, fmt.Errorf("gRPC TLS: %w", err)
		}
		creds = append(creds, grpc.Creds(credentials.NewTLS(reloader.ServerConfig())))
	}
	xg := grpc.NewServer(grpcutil.ServerOptions(10000, 16<<20, creds...)...)
	xs.Register(xg)
	eg := extproc.NewGRPCServer(extproc.NewServer(ctrl, log, reg, extproc.WithClusterGate(xs)), extproc.GRPCOptions{ServerOptions: creds})

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
	srv := &Server{Discovery: ctrl, XDS: xs, Registry: reg,
		XDSAddr: lis.XDS.Addr().String(), ExtProcAddr: lis.ExtProc.Addr().String(), HTTPAddr: lis.HTTP.Addr().String()}
	hs := &http.Server{Handler: srv.httpHandler(o.Pprof), ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 5)
	var wg sync.WaitGroup
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	run("discovery", func() error { return ctrl.Run(ctx) })
	run("xds", func() error { return xs.Run(ctx) })
	run("xds gRPC", func() error { return grpcutil.Serve(ctx, xg, lis.XDS, 5*time.Second) })
	run("ext_proc gRPC", func() error { return extproc.Serve(ctx, eg, lis.ExtProc, 10*time.Second) })
	run("http", func() error { return hs.Serve(lis.HTTP) })
	if reloader != nil {
		run("certificate reload", func() error { reloader.Run(ctx); return nil })
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	done := make(chan error, 1)
	go func() {
		wg.Wait()
		close(errc)
		var errs []error
		for err := range errc {
			errs = append(errs, err)
		}
		done <- errors.Join(errs...)
	}()
	log.Info("serving", zap.String("xds", srv.XDSAddr), zap.String("extproc", srv.ExtProcAddr), zap.String("http", srv.HTTPAddr))
	return srv, done, nil
}

// Ready reports whether the first Topology is published to the xDS cache.
func (s *Server) Ready() bool {
	v, _ := s.XDS.Version()
	return s.Discovery.Current() != nil && v != ""
}

// TopologyView is the JSON document /topology serves and `skewgate topology` prints.
type TopologyView struct {
	Version   string               `json:"version"`
	Generated time.Time            `json:"generated"`
	Snapshot  string               `json:"snapshot"`
	Upstreams []discovery.Upstream `json:"upstreams"`
	// Unproven upstreams have no Envoy cluster yet; Ignored Leases are no upstream (with a hint).
	Unproven []discovery.Upstream       `json:"unproven,omitempty"`
	Ignored  []discovery.IgnoredLease   `json:"ignored,omitempty"`
	Sets     []discovery.CapabilitySet  `json:"sets"`
	Skewed   []discovery.SkewedResource `json:"skewed"`
}

func (s *Server) httpHandler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "no Topology published yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/topology", func(w http.ResponseWriter, _ *http.Request) {
		t := s.Discovery.Current()
		if t == nil {
			http.Error(w, "no Topology yet", http.StatusServiceUnavailable)
			return
		}
		snap, _ := s.XDS.Version()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(TopologyView{Version: t.Version, Generated: t.Generated, Snapshot: snap, Upstreams: t.Upstreams,
			Unproven: t.Unproven, Ignored: t.Ignored, Sets: t.Sets, Skewed: t.Skewed()})
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
