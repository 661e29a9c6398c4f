package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// commonTLS is a resolved CommonTlsContext. Inline certificates are read once, when the resource
// is accepted, and never again (Envoy loads inline DataSources at config time and has no watch for
// them); SDS certificates come from the secret store, which reloads them on moves only.
type commonTLS struct {
	cert func() (*tls.Certificate, error) // nil: no certificate
	pool func() (*x509.CertPool, error)   // nil: no validation context
	sans []string
	alpn []string
	min  uint16
}

func resolveCommon(c *tlsv3.CommonTlsContext, secrets *secretStore) (*commonTLS, error) {
	out := &commonTLS{alpn: c.GetAlpnProtocols(), min: tls.VersionTLS12}
	if c.GetTlsParams().GetTlsMinimumProtocolVersion() == tlsv3.TlsParameters_TLSv1_3 {
		out.min = tls.VersionTLS13
	}
	switch {
	case len(c.GetTlsCertificates()) > 0:
		pair, err := loadPair(c.TlsCertificates[0])
		if err != nil {
			return nil, fmt.Errorf("inline certificate: %w", err)
		}
		out.cert = func() (*tls.Certificate, error) { return pair, nil }
	case len(c.GetTlsCertificateSdsSecretConfigs()) > 0:
		name := c.TlsCertificateSdsSecretConfigs[0].Name
		out.cert = func() (*tls.Certificate, error) {
			m, err := secrets.get(name)
			if err != nil {
				return nil, err
			}
			if m.cert == nil {
				return nil, fmt.Errorf("secret %s holds no certificate", name)
			}
			return m.cert, nil
		}
	}
	var inline *tlsv3.CertificateValidationContext
	var sds string
	switch v := c.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		inline = v.ValidationContext
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		sds = v.ValidationContextSdsSecretConfig.Name
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		inline, sds = v.CombinedValidationContext.DefaultValidationContext, v.CombinedValidationContext.GetValidationContextSdsSecretConfig().GetName()
	default:
		return out, nil
	}
	for _, m := range inline.GetMatchTypedSubjectAltNames() {
		if m.SanType != tlsv3.SubjectAltNameMatcher_DNS || m.Matcher.GetExact() == "" {
			return nil, fmt.Errorf("only exact DNS SAN matchers are supported, got %v", m)
		}
		out.sans = append(out.sans, m.Matcher.GetExact())
	}
	if sds != "" {
		out.pool = func() (*x509.CertPool, error) {
			m, err := secrets.get(sds)
			if err != nil {
				return nil, err
			}
			if m.pool == nil {
				return nil, fmt.Errorf("secret %s holds no trusted CA", sds)
			}
			return m.pool, nil
		}
		return out, nil
	}
	p, err := loadPool(inline)
	if err != nil {
		return nil, fmt.Errorf("inline validation context: %w", err)
	}
	if p != nil {
		out.pool = func() (*x509.CertPool, error) { return p, nil }
	}
	return out, nil
}

// secretNames lists the SDS secrets a transport socket's TLS context names; the data plane reads
// them from the resources it receives, as Envoy does, and subscribes to exactly those.
func secretNames(ts *corev3.TransportSocket) []string {
	if ts == nil {
		return nil
	}
	var c *tlsv3.CommonTlsContext
	var up tlsv3.UpstreamTlsContext
	var down tlsv3.DownstreamTlsContext
	if ts.GetTypedConfig().UnmarshalTo(&up) == nil {
		c = up.CommonTlsContext
	} else if ts.GetTypedConfig().UnmarshalTo(&down) == nil {
		c = down.CommonTlsContext
	}
	var out []string
	for _, s := range c.GetTlsCertificateSdsSecretConfigs() {
		out = append(out, s.Name)
	}
	if n := c.GetValidationContextSdsSecretConfig().GetName(); n != "" {
		out = append(out, n)
	}
	if n := c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName(); n != "" {
		out = append(out, n)
	}
	return out
}

// upstreamTLS builds the client TLS config of an UpstreamTlsContext: SNI, ALPN, the client
// certificate if any, and verification of the chain against trusted_ca and of the SAN against
// match_typed_subject_alt_names only (Envoy does not verify against SNI).
func upstreamTLS(ts *corev3.TransportSocket, secrets *secretStore) (*tls.Config, error) {
	if ts == nil {
		return nil, nil
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return nil, err
	}
	c, err := resolveCommon(ctx.CommonTlsContext, secrets)
	if err != nil {
		return nil, err
	}
	if c.pool == nil {
		return nil, errors.New("upstream TLS without a validation context: skewgate always verifies")
	}
	cfg := &tls.Config{ServerName: ctx.Sni, NextProtos: c.alpn, MinVersion: c.min, InsecureSkipVerify: true}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c.cert == nil {
			return &tls.Certificate{}, nil // no certificate configured: present none
		}
		return c.cert()
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		roots, err := c.pool()
		if err != nil {
			return err
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no server certificate")
		}
		inter := x509.NewCertPool()
		for _, pc := range cs.PeerCertificates[1:] {
			inter.AddCert(pc)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		if len(c.sans) == 0 {
			return nil
		}
		for _, s := range c.sans {
			if leaf.VerifyHostname(s) == nil {
				return nil
			}
		}
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates,
			Err: fmt.Errorf("certificate SANs %v match none of %v", leaf.DNSNames, c.sans)}
	}
	return cfg, nil
}

// downstreamTLS builds the listener's server TLS: certificate, ALPN, and with a validation context
// client certificates requested and verified if presented (require_client_certificate false).
func downstreamTLS(ts *corev3.TransportSocket, secrets *secretStore) (*tls.Config, error) {
	var ctx tlsv3.DownstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return nil, err
	}
	c, err := resolveCommon(ctx.CommonTlsContext, secrets)
	if err != nil {
		return nil, err
	}
	if c.cert == nil {
		return nil, errors.New("listener TLS without a certificate")
	}
	require := ctx.GetRequireClientCertificate().GetValue()
	return &tls.Config{NextProtos: c.alpn, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		crt, err := c.cert()
		if err != nil {
			return nil, fmt.Errorf("listener certificate: %v", err)
		}
		cfg := &tls.Config{NextProtos: c.alpn, MinVersion: c.min, Certificates: []tls.Certificate{*crt},
			// disable_stateless_session_resumption: no session tickets. A Go server keeps no
			// session-ID cache, so disable_stateful_session_resumption has nothing more to turn off.
			SessionTicketsDisabled: ctx.GetDisableStatelessSessionResumption()}
		if c.pool != nil {
			if cfg.ClientCAs, err = c.pool(); err != nil {
				return nil, err
			}
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
			if require {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			}
			cfg.VerifyPeerCertificate = verifySSLClientPurpose
		}
		return cfg, nil
	}}, nil
}
