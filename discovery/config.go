package discovery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Config configures a Controller. Zero durations take the defaults in brackets.
type Config struct {
	// Client reads identity Leases and the default/kubernetes EndpointSlice. Nil: static upstreams only.
	Client kubernetes.Interface
	// Metadata watches CustomResourceDefinitions and APIServices, to refetch discovery at once when
	// they change. Nil: only the periodic poll notices them.
	Metadata metadata.Interface
	// Upstream holds the credentials and CA used to talk to every upstream; its Host is replaced by
	// each upstream's address and the certificate verified for kubernetes.default.svc.
	Upstream *rest.Config
	Static   []StaticUpstream
	Policy   AddressPolicy
	// TrustEndpointSlice accepts Lease addresses listed in the default/kubernetes EndpointSlice.
	TrustEndpointSlice bool

	StaleAfter       time.Duration // a Lease not renewed for this long is gone [30s: 3 renew periods]
	ProbeInterval    time.Duration // /readyz probes [2s]
	FailureThreshold int           // failed probes in a row before "not ready" [3]
	PollInterval     time.Duration // discovery refetch [30s]
	CapabilityTTL    time.Duration // how long to keep the last capabilities of an upstream whose fetches fail [10m]
	DepartedTTL      time.Duration // how long resources only a departed upstream served answer 503, not 404 [10m]
	RequestTimeout   time.Duration // per request to an upstream [5s]
	InitialTimeout   time.Duration // longest wait for first fetches before the first Topology [15s]
	MaxDocumentBytes int64         // largest accepted discovery or OpenAPI v3 document [8 MiB]
	// MaxOpenAPIBytes caps the bytes of the OpenAPI v3 documents held for merging, all upstreams
	// together (a document several upstreams publish under one hash counts once) [64 MiB].
	MaxOpenAPIBytes int64
	// MaxUpstreams caps the upstreams (static ones included); Leases past it are refused [64].
	MaxUpstreams int

	Logger   *zap.Logger
	Registry prometheus.Registerer
	// Clock is the one clock of the controller (Lease staleness, probes, refetches, the work queue,
	// durations, a fetched OpenAPI document's Built, the refetch after a CRD or APIService change);
	// tests pass a fake one and step it [clock.RealClock].
	Clock clock.WithTickerAndDelayedExecution
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StaleAfter, 30*time.Second)
	def(&c.ProbeInterval, 2*time.Second)
	def(&c.PollInterval, 30*time.Second)
	def(&c.CapabilityTTL, 10*time.Minute)
	def(&c.DepartedTTL, 10*time.Minute)
	def(&c.RequestTimeout, 5*time.Second)
	def(&c.InitialTimeout, 15*time.Second)
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = 3
	}
	if c.MaxUpstreams <= 0 {
		c.MaxUpstreams = DefaultMaxUpstreams
	}
	if c.MaxDocumentBytes <= 0 {
		c.MaxDocumentBytes = 8 << 20
	}
	if c.MaxOpenAPIBytes <= 0 {
		c.MaxOpenAPIBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// DefaultMaxUpstreams is the default cap on upstreams. A control plane runs 3 to 5 apiservers, twice
// that during a surge upgrade; 64 leaves ample room while bounding what forged Leases can cost: one
// worker probing every ProbeInterval per upstream, and in every Envoy two clusters (HTTP/2 and
// HTTP/1.1) per upstream, each health-checked every second.
const DefaultMaxUpstreams = 64

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)
