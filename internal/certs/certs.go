// Package certs loads TLS material from files and reloads it when the files change on disk, so
// rotated certificates (cert-manager, kubeadm certs renew) take effect without a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Reloader serves a certificate pair and an optional client CA bundle, re-reading them when a file's
// modification time or size changes (checked at most once per second, at handshake time).
type Reloader struct {
	certFile, keyFile, caFile string

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// NewReloader loads the files once; an error here is a configuration error.
func NewReloader(certFile, keyFile, caFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) stampNow() string {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile, r.caFile} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return s
}

func (r *Reloader) load() error {
	stamp := r.stampNow()
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load %s and %s: %w", r.certFile, r.keyFile, err)
	}
	var pool *x509.CertPool
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return err
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New(r.caFile + ": no certificate found")
		}
	}
	r.cert, r.pool, r.stamp = &cert, pool, stamp
	return nil
}

// current reloads if the files changed; a failed reload keeps the last good material.
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) > time.Second {
		r.checked = time.Now()
		if r.stampNow() != r.stamp {
			_ = r.load()
		}
	}
	return r.cert, r.pool
}

// ServerConfig is a TLS 1.3 server config presenting the certificate and, with a CA, requiring and
// verifying client certificates.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := r.current()
			c := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2"}}
			if pool != nil {
				c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}
}
