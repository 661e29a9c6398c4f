package serve

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// clientCertExpiry exports when the client certificate of skewgate's kubeconfig expires
// (0 when it uses none, or the file cannot be read), read at every scrape: a certificate renewed on
// disk shows at once, and one that nobody renews can be alerted on before discovery starts failing
// with 401.
func clientCertExpiry(rc *rest.Config) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "skewgate_client_certificate_expiry_timestamp_seconds",
		Help: "When the client certificate of skewgate's kubeconfig expires (Unix time; 0: none or unreadable).",
	}, func() float64 {
		data := rc.TLSClientConfig.CertData
		if rc.TLSClientConfig.CertFile != "" {
			b, err := os.ReadFile(rc.TLSClientConfig.CertFile)
			if err != nil {
				return 0
			}
			data = b
		}
		if len(data) == 0 {
			return 0
		}
		certs, err := certutil.ParseCertsPEM(data)
		if err != nil || len(certs) == 0 {
			return 0
		}
		return float64(certs[0].NotAfter.Unix())
	})
}
