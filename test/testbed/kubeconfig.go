package testbed

import (
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Credential selects how a kubeconfig or rest.Config authenticates.
type Credential int

const (
	AdminByToken Credential = iota
	AdminByCert
	LowPrivByToken
	LowPrivByCert
)

// String names the credential; it is also the kubeconfig's file name stem.
func (c Credential) String() string {
	switch c {
	case AdminByCert:
		return "admin-cert"
	case LowPrivByToken:
		return "alice-token"
	case LowPrivByCert:
		return "alice-cert"
	default:
		return "admin-token"
	}
}

func (tb *Testbed) authInfo(c Credential) *clientcmdapi.AuthInfo {
	switch c {
	case AdminByCert:
		return &clientcmdapi.AuthInfo{ClientCertificate: tb.PKI.Admin.Cert, ClientKey: tb.PKI.Admin.Key}
	case LowPrivByToken:
		return &clientcmdapi.AuthInfo{Token: LowPrivToken}
	case LowPrivByCert:
		return &clientcmdapi.AuthInfo{ClientCertificate: tb.PKI.LowPriv.Cert, ClientKey: tb.PKI.LowPriv.Key}
	default:
		return &clientcmdapi.AuthInfo{Token: AdminToken}
	}
}

// KubeconfigPath is the admin kubeconfig the testbed writes for a credential: one context per
// apiserver, named like it, the first one current.
func (tb *Testbed) KubeconfigPath(c Credential) string {
	return filepath.Join(tb.cfg.Dir, c.String()+".kubeconfig")
}

// AdminTokenKubeconfig and AdminCertKubeconfig are the two admin kubeconfigs.
func (tb *Testbed) AdminTokenKubeconfig() string { return tb.KubeconfigPath(AdminByToken) }
func (tb *Testbed) AdminCertKubeconfig() string  { return tb.KubeconfigPath(AdminByCert) }

func (tb *Testbed) writeKubeconfigs() error {
	for _, c := range []Credential{AdminByToken, AdminByCert, LowPrivByToken, LowPrivByCert} {
		servers := map[string]string{}
		var names []string
		for _, a := range tb.Apiservers() {
			servers[a.Name] = a.URL()
			names = append(names, a.Name)
		}
		if err := tb.WriteKubeconfig(tb.KubeconfigPath(c), c, servers, names[0]); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig with one context per entry of servers (context name -> URL),
// verifying servers against the cluster CA with SNI kubernetes.default.svc.
func (tb *Testbed) WriteKubeconfig(path string, c Credential, servers map[string]string, current string) error {
	return tb.writeKubeconfig(path, tb.authInfo(c), servers, current)
}

func (tb *Testbed) writeKubeconfig(path string, user *clientcmdapi.AuthInfo, servers map[string]string, current string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["user"] = user
	for name, url := range servers {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: tb.PKI.CA.Cert, TLSServerName: ServingSNI}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "user"}
	}
	cfg.CurrentContext = current
	return clientcmd.WriteToFile(*cfg, path)
}

// RESTConfig returns a client-go config for url with the given credential.
func (tb *Testbed) RESTConfig(url string, c Credential) *rest.Config {
	ai := tb.authInfo(c)
	return &rest.Config{
		Host:        url,
		BearerToken: ai.Token,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: tb.PKI.CA.Cert, ServerName: ServingSNI,
			CertFile: ai.ClientCertificate, KeyFile: ai.ClientKey,
		},
		QPS: -1, // no client-side throttling in tests
	}
}
