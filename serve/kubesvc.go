package serve

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/kubesvc"
	"github.com/skewgate/skewgate/serve/options"
)

// kubernetesEndpoints builds the kubernetes Service's endpoint writer when --kubernetes-endpoints
// asks for it (nil otherwise). It writes with discovery's client and probes the node's front with
// the CA discovery verifies apiservers with: the front serves the node's apiserver certificate.
func kubernetesEndpoints(o *options.Options, dcfg discovery.Config, src *discovery.Controller, log *zap.Logger, m *kubesvc.Metrics) (*kubesvc.Controller, error) {
	if !o.KubernetesEndpoints {
		return nil, nil
	}
	if dcfg.Client == nil {
		return nil, errors.New("--kubernetes-endpoints needs a kubeconfig (or the in-cluster config)")
	}
	if len(o.CIDRs()) == 0 && o.TrustEndpointSlice {
		log.Warn("--kubernetes-endpoints without --allowed-cidr: once skewgate writes the kubernetes EndpointSlice, discovery no longer trusts it, so apiservers (and the fronts beside them) are accepted only as --static-upstream")
	}
	roots, err := upstreamRoots(dcfg)
	if err != nil {
		return nil, fmt.Errorf("--kubernetes-endpoints: the front probe's CA: %w", err)
	}
	return kubesvc.New(kubesvc.Config{
		Client: dcfg.Client, Source: src, Member: o.KubernetesEndpointsMember, Endpoint: o.KubernetesEndpoint(),
		TTL: o.KubernetesEndpointsTTL, AllowedCIDRs: o.CIDRs(), MaxMembers: o.MaxUpstreams,
		Probe:  kubesvc.TLSProbe(&tls.Config{RootCAs: roots}, o.KubernetesEndpointsTTL/3),
		Logger: log, Metrics: m,
	})
}

// upstreamRoots is the CA of the upstream client (--upstream-ca-file, else the kubeconfig's); nil
// (the system roots) when it has none.
func upstreamRoots(dcfg discovery.Config) (*x509.CertPool, error) {
	switch tc := dcfg.Upstream.TLSClientConfig; {
	case len(tc.CAData) > 0:
		return cert.NewPoolFromBytes(tc.CAData)
	case tc.CAFile != "":
		return cert.NewPool(tc.CAFile)
	}
	return nil, nil
}
