package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// Secret names. Every certificate, key and CA Envoy uses travels over SDS as *file paths*, never as
// contents, so skewgate never holds a private key and Envoy reloads them when they are replaced.
//
// How Envoy reloads (source/common/secret/sds_api.cc, SdsApi::onConfigUpdate and
// TlsCertificateSdsApi/CertificateValidationContextSdsApi::setSecret; read at v1.35.0, v1.36.0 and
// in a 2026 main copy, and the 1.37.0-1.40.0 changelogs add only 1.39.0's opt-in watch_modify and
// 1.37.0's recovery of a secret whose files were missing at first: test/dataplane/CONFORMANCE.md row 25): a secret with a
// watched_directory reloads all its files when anything is moved into that directory
// (Config::WatchedDirectory watches it for MovedTo only); without one, Envoy watches each file's
// directory for MovedTo. Either way only a move (an atomic rename, or the symlink swap of a Secret
// volume) is seen: a file rewritten in place is not, until the next move into the directory or a
// restart. Inline certificates never reload, which is why none are generated. Every secret here
// names the directory of its files as watched_directory, so a rotation of the key and the
// certificate is read as one, after the move that completes it.
const (
	SecretFrontCert      = "skewgate-front-cert"
	SecretClientCA       = "skewgate-front-client-ca"
	SecretUpstreamCA     = "skewgate-upstream-ca"
	SecretFrontProxyCert = "skewgate-front-proxy-cert"
	// SecretExtProcCert and SecretExtProcCA are Envoy's mTLS client certificate towards the ext_proc
	// service and the CA that verifies the service.
	SecretExtProcCert = "skewgate-extproc-client-cert"
	SecretExtProcCA   = "skewgate-extproc-ca"
)

func (tb *translator) secrets() []*tlsv3.Secret {
	out := []*tlsv3.Secret{
		envoyconf.CertSecret(SecretFrontCert, tb.o.ServingCertFile, tb.o.ServingKeyFile),
		envoyconf.CertSecret(SecretFrontProxyCert, tb.o.FrontProxyCertFile, tb.o.FrontProxyKeyFile),
		envoyconf.CASecret(SecretUpstreamCA, tb.o.UpstreamCAFile),
	}
	if tb.o.ClientCAFile != "" {
		out = append(out, envoyconf.CASecret(SecretClientCA, tb.o.ClientCAFile))
	}
	if tb.o.ExtProcCAFile != "" {
		out = append(out,
			envoyconf.CertSecret(SecretExtProcCert, tb.o.ExtProcCertFile, tb.o.ExtProcKeyFile),
			envoyconf.CASecret(SecretExtProcCA, tb.o.ExtProcCAFile))
	}
	return out
}

func sdsRef(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: envoyconf.ADSSource()}
}

// apiserverTLS is the upstream TLS of the apiserver clusters: the cluster CA by SDS and the name
// check (kubernetes.default.svc) inline, and with clientCert the front-proxy certificate by SDS.
func apiserverTLS(alpn string, clientCert bool) (*corev3.TransportSocket, error) {
	common := &tlsv3.CommonTlsContext{
		TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			// Envoy checks the chain but not the name unless told to.
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_DNS,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: wire.UpstreamSNI}},
			}}},
			ValidationContextSdsSecretConfig: sdsRef(SecretUpstreamCA),
		}},
		AlpnProtocols: []string{alpn},
	}
	if clientCert {
		// The front-proxy client certificate: the apiserver trusts X-Remote-* only from it.
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsRef(SecretFrontProxyCert)}
	}
	tlsAny, err := envoyconf.Pack(&tlsv3.UpstreamTlsContext{Sni: wire.UpstreamSNI, CommonTlsContext: common})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: envoyconf.TransportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}, nil
}

type socketKey struct {
	alpn       string
	clientCert bool
}

// apiserverSocket is apiserverTLS, built once per translation.
func (tb *translator) apiserverSocket(alpn string, clientCert bool) (*corev3.TransportSocket, error) {
	k := socketKey{alpn, clientCert}
	if ts := tb.sockets[k]; ts != nil {
		return ts, nil
	}
	ts, err := apiserverTLS(alpn, clientCert)
	if err != nil {
		return nil, err
	}
	if tb.sockets == nil {
		tb.sockets = map[socketKey]*corev3.TransportSocket{}
	}
	tb.sockets[k] = ts
	return ts, nil
}
