// Package certs serves skewgate's own gRPC serving certificate and client CA from files and reloads
// them when they are rotated (cert-manager, kubeadm certs renew) without a restart. Reading, checking
// and holding the last good content is k8s.io/apiserver's dynamiccertificates; this package drives
// it, builds the TLS configuration and reports every failed reload.
//
// The providers' own Run loop is not used: it reports a failed reload only to klog through
// utilruntime.HandleError, which skewgate neither logs nor counts, and catching it there would mean
// changing process-wide handlers. Their RunOnce returns the error instead, so Run here calls RunOnce
// on every provider each Interval: a failure is logged with zap and counted in
// skewgate_certificate_reload_failures_total, and the provider keeps its last good content (it
// stores new content only once it parsed, and for a pair, once the key matches the certificate).
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/utils/clock"
)

// Label values of the certificate label.
const (
	Serving  = "grpc_serving"
	ClientCA = "grpc_client_ca"
)

// DefaultInterval is how often the files are re-read. A rotation takes effect within it; certificates
// are renewed days or weeks before they expire, so seconds do not matter, and re-reading three small
// files costs nothing.
const DefaultInterval = 10 * time.Second

// Config names the files. ClientCAFile may be empty: client certificates are then not requested.
type Config struct {
	CertFile, KeyFile, ClientCAFile string
	Interval                        time.Duration
	Logger                          *zap.Logger
	Registry                        prometheus.Registerer
	Clock                           clock.WithTicker // ticks Interval [the real clock]
}

// Reloader holds the current TLS configuration of the gRPC listeners.
type Reloader struct {
	cfg      Config
	serving  *dynamiccertificates.DynamicCertKeyPairContent
	clientCA *dynamiccertificates.DynamicFileCAContent
	m        *metrics
	current  atomic.Pointer[tls.Config]

	mu       sync.Mutex        // serialises sync
	built    []byte            // serving certificate and CA bundle of current
	reported map[string]string // per certificate, the last failure logged ("" once it recovered)
}

// listener counts a reload: the providers call Enqueue when they stored new content.
type listener func()

func (l listener) Enqueue() { l() }

// New loads the files once; an error here is a configuration error.
func New(cfg Config) (*Reloader, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	r := &Reloader{cfg: cfg, m: newMetrics(cfg.Registry), reported: map[string]string{}}
	var err error
	if r.serving, err = dynamiccertificates.NewDynamicServingContentFromFiles(Serving, cfg.CertFile, cfg.KeyFile); err != nil {
		return nil, fmt.Errorf("load %s and %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	r.serving.AddListener(listener(func() { r.m.reloads.WithLabelValues(Serving).Inc() }))
	if cfg.ClientCAFile != "" {
		if r.clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile(ClientCA, cfg.ClientCAFile); err != nil {
			return nil, fmt.Errorf("load %s: %w", cfg.ClientCAFile, err)
		}
		r.clientCA.AddListener(listener(func() { r.m.reloads.WithLabelValues(ClientCA).Inc() }))
	}
	if err := r.build(); err != nil {
		return nil, err
	}
	return r, nil
}

// Run re-reads the files every Interval until ctx ends.
func (r *Reloader) Run(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			r.sync(ctx)
		}
	}
}

// sync re-reads every file and rebuilds the configuration from the providers' current content.
func (r *Reloader) sync(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	servingErr := r.serving.RunOnce(ctx)
	var caErr error
	if r.clientCA != nil {
		caErr = r.clientCA.RunOnce(ctx)
	}
	// build uses the last good content of both, so it fails only if that content cannot be combined.
	if err := r.build(); err != nil && servingErr == nil {
		servingErr = err
	}
	r.report(Serving, servingErr, r.cfg.CertFile+" and "+r.cfg.KeyFile)
	if r.clientCA != nil {
		r.report(ClientCA, caErr, r.cfg.ClientCAFile)
	}
}

// report counts a failure, and logs it unless the same failure was logged last time (a broken file is
// retried every Interval; the counter shows that it persists).
func (r *Reloader) report(name string, err error, files string) {
	if err == nil {
		if r.reported[name] != "" {
			r.cfg.Logger.Info("certificate reload recovered", zap.String("certificate", name), zap.String("files", files))
			r.reported[name] = ""
		}
		return
	}
	r.m.failures.WithLabelValues(name).Inc()
	if r.reported[name] != err.Error() {
		r.cfg.Logger.Error("certificate reload failed; serving the last good one", zap.String("certificate", name),
			zap.String("files", files), zap.Error(err))
		r.reported[name] = err.Error()
	}
}

// build makes a new configuration when the providers' content changed.
func (r *Reloader) build() error {
	certPEM, keyPEM := r.serving.CurrentCertKeyContent()
	var caPEM []byte
	if r.clientCA != nil {
		caPEM = r.clientCA.CurrentCABundleContent()
	}
	stamp := append(append(append([]byte{}, certPEM...), 0), caPEM...)
	if r.current.Load() != nil && bytes.Equal(stamp, r.built) {
		return nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}}
	if r.clientCA != nil {
		opts, ok := r.clientCA.VerifyOptions()
		if !ok || opts.Roots == nil {
			return errors.New("no client CA loaded")
		}
		c.ClientCAs, c.ClientAuth = opts.Roots, tls.RequireAndVerifyClientCert
	}
	r.current.Store(c)
	r.built = stamp
	return nil
}

// ServerConfig is a TLS 1.3 server configuration presenting the current certificate and, with a
// client CA, requiring and verifying client certificates against the current CA.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current.Load(), nil
		},
	}
}
