package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// material is what a secret's files held when they were last (re)loaded.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// secretEntry is one SDS secret. Its files are read when the secret arrives and again only when the
// watch fires (source/common/secret/sds_api.cc: SdsApi::onConfigUpdate reads the data sources and
// registers a filesystem watch; a failing read NACKs the update).
type secretEntry struct {
	proto *tlsv3.Secret
	cur   atomic.Pointer[material]
	stop  func()
}

type secretStore struct {
	ctx  context.Context
	logf func(string, ...any)
	mu   sync.RWMutex
	m    map[string]*secretEntry
}

func newSecretStore(ctx context.Context, logf func(string, ...any)) *secretStore {
	return &secretStore{ctx: ctx, logf: logf, m: map[string]*secretEntry{}}
}

// loadSecret reads a secret's files: a certificate pair or a trusted CA bundle.
func loadSecret(s *tlsv3.Secret) (*material, error) {
	switch {
	case s.GetTlsCertificate() != nil:
		c, err := loadPair(s.GetTlsCertificate())
		return &material{cert: c}, err
	case s.GetValidationContext() != nil:
		p, err := loadPool(s.GetValidationContext())
		return &material{pool: p}, err
	}
	return nil, fmt.Errorf("secret %s: only tls_certificate and validation_context are supported", s.Name)
}

func loadPair(tc *tlsv3.TlsCertificate) (*tls.Certificate, error) {
	cert, err := dataSource(tc.GetCertificateChain().GetFilename(), tc.GetCertificateChain().GetInlineBytes())
	if err != nil {
		return nil, err
	}
	key, err := dataSource(tc.GetPrivateKey().GetFilename(), tc.GetPrivateKey().GetInlineBytes())
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(cert, key)
	return &pair, err
}

func loadPool(vc *tlsv3.CertificateValidationContext) (*x509.CertPool, error) {
	if vc.GetTrustedCa() == nil {
		return nil, nil
	}
	data, err := dataSource(vc.GetTrustedCa().GetFilename(), vc.GetTrustedCa().GetInlineBytes())
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		return nil, errors.New("trusted_ca holds no certificate")
	}
	return p, nil
}

func dataSource(file string, inline []byte) ([]byte, error) {
	if file == "" {
		return inline, nil
	}
	return os.ReadFile(file)
}

// watchPaths is what Envoy's SdsApi watches: the watched_directory (any move into it), or else each
// file's own path (a move onto that name in its directory). Both only on MovedTo.
func watchPaths(s *tlsv3.Secret) (dirs []string, files []string) {
	var wd string
	var srcs []string
	if tc := s.GetTlsCertificate(); tc != nil {
		wd = tc.GetWatchedDirectory().GetPath()
		srcs = []string{tc.GetCertificateChain().GetFilename(), tc.GetPrivateKey().GetFilename()}
	}
	if vc := s.GetValidationContext(); vc != nil {
		wd = vc.GetWatchedDirectory().GetPath()
		srcs = []string{vc.GetTrustedCa().GetFilename()}
	}
	if wd != "" {
		return []string{wd}, nil
	}
	for _, f := range srcs {
		if f != "" {
			files = append(files, f)
		}
	}
	return nil, files
}

// update takes the secrets of an accepted SDS response. Envoy holds one SDS subscription per secret
// name (source/common/secret/sds_api.cc) and keeps a secret across responses and across xDS stream
// reconnections: a response that does not carry a secret changes nothing for it, so neither does
// it here. A secret whose files cannot be read rejects the whole response (NACK) and changes nothing.
func (s *secretStore) update(resources []*anypb.Any) error {
	s.mu.RLock()
	old := s.m
	s.mu.RUnlock()
	next := maps.Clone(old)
	if next == nil {
		next = map[string]*secretEntry{}
	}
	var fresh []*secretEntry
	for _, a := range resources {
		var sec tlsv3.Secret
		if err := a.UnmarshalTo(&sec); err != nil {
			return err
		}
		if err := sec.ValidateAll(); err != nil {
			return err
		}
		// watch_modify (a 1.39.0 field, changelogs/1.39.0.yaml, area watched_directory) makes Envoy
		// reload on in-place writes (IN_MODIFY) too; the stand-in watches moves only, so it refuses
		// the field rather than reload less often than Envoy would.
		if sec.GetTlsCertificate().GetWatchedDirectory().GetWatchModify() || sec.GetValidationContext().GetWatchedDirectory().GetWatchModify() {
			return fmt.Errorf("secret %s: watched_directory.watch_modify is not supported", sec.Name)
		}
		if e, ok := old[sec.Name]; ok && proto.Equal(e.proto, &sec) {
			next[sec.Name] = e
			continue
		}
		m, err := loadSecret(&sec)
		if err != nil {
			return fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		e := &secretEntry{proto: &sec}
		e.cur.Store(m)
		next[sec.Name] = e
		fresh = append(fresh, e)
	}
	for _, e := range fresh {
		dirs, files := watchPaths(e.proto)
		e.stop = watchMovedTo(s.ctx, dirs, files, func() {
			m, err := loadSecret(e.proto)
			if err != nil {
				s.logf("secret %s: reload after a move failed, keeping the old one: %v", e.proto.Name, err)
				return
			}
			e.cur.Store(m)
			s.logf("secret %s reloaded after a move into its watched path", e.proto.Name)
		})
	}
	s.mu.Lock()
	s.m = next
	s.mu.Unlock()
	for name, e := range old {
		if next[name] != e && e.stop != nil {
			e.stop()
		}
	}
	return nil
}

func (s *secretStore) get(name string) (*material, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e, ok := s.m[name]; ok {
		return e.cur.Load(), nil
	}
	return nil, fmt.Errorf("secret %q not received (yet)", name)
}

func (s *secretStore) has(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.m[name]
	return ok
}

// cleanDir is the directory a watched path names.
func cleanDir(p string) string { return filepath.Clean(p) }

// applySecrets takes the secrets of an SDS response; a listener warming for them may become active
// (warming.go).
func (d *DataPlane) applySecrets(resources []*anypb.Any) error {
	if err := d.secrets.update(resources); err != nil {
		return err
	}
	d.maybeActivate()
	return nil
}
