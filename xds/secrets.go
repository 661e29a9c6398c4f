package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/skewgate/skewgate/internal/wire"
)

// Secret names. The front's certificates travel over SDS as *file paths*, never as contents: Envoy
// reads the files itself and, because they arrive by SDS, watches their directories and reloads
// them when they change (TlsCertificate.watched_directory: "only applies when a TlsCertificate is
// delivered by SDS with references to filesystem paths"; Envoy's SDS key rotation docs). So a renewed
// apiserver or front-proxy certificate takes effect without restarting Envoy, and skewgate never
// holds a private key.
const (
	SecretFrontCert      = "skewgate-front-cert"
	SecretClientCA       = "skewgate-front-client-ca"
	SecretUpstreamCA     = "skewgate-upstream-ca"
	SecretFrontProxyCert = "skewgate-front-proxy-cert"
)

func (tb *translator) secrets() []*tlsv3.Secret {
	cert := func(name, chain, key string) *tlsv3.Secret {
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: file(chain), PrivateKey: file(key),
		}}}
	}
	ca := func(name, path string) *tlsv3.Secret {
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: file(path),
		}}}
	}
	out := []*tlsv3.Secret{
		cert(SecretFrontCert, tb.o.ServingCertFile, tb.o.ServingKeyFile),
		cert(SecretFrontProxyCert, tb.o.FrontProxyCertFile, tb.o.FrontProxyKeyFile),
		ca(SecretUpstreamCA, tb.o.UpstreamCAFile),
	}
	if tb.o.ClientCAFile != "" {
		out = append(out, ca(SecretClientCA, tb.o.ClientCAFile))
	}
	return out
}

func sdsRef(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

// apiserverTLS is the upstream TLS of every apiserver cluster: the front-proxy certificate and the
// cluster CA by SDS, and the name check (kubernetes.default.svc) inline.
func apiserverTLS(alpn string) (*corev3.TransportSocket, error) {
	tlsAny, err := pack(&tlsv3.UpstreamTlsContext{
		Sni: wire.UpstreamSNI,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			// The front-proxy client certificate: the apiserver trusts X-Remote-* only from it.
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsRef(SecretFrontProxyCert)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				// Envoy checks the chain but not the name unless told to.
				DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: tlsv3.SubjectAltNameMatcher_DNS,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: wire.UpstreamSNI}},
				}}},
				ValidationContextSdsSecretConfig: sdsRef(SecretUpstreamCA),
			}},
			AlpnProtocols: []string{alpn},
		},
	})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: transportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}, nil
}
