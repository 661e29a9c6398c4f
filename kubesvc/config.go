package kubesvc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/skewgate/skewgate/discovery"
)

// Names of what the mode reads and writes.
const (
	// Namespace holds the member Leases (`skewgate kubeadm rbac --kubernetes-endpoints` renders it).
	Namespace = "skewgate"
	// ServiceNamespace and ServiceName are the Service whose endpoints the mode writes.
	ServiceNamespace, ServiceName = "default", "kubernetes"
	// MemberLabel marks a member Lease (value "true"); the informer selects on it.
	MemberLabel = "skewgate.io/kubernetes-endpoint-member"
	// WriterAnnotation names the member that last wrote the EndpointSlice (informational; a write
	// over another member's is held back, see reconcile.go).
	WriterAnnotation = "skewgate.io/written-by"
	// EndpointAnnotation carries a member's endpoint as IPv4:port.
	EndpointAnnotation = "skewgate.io/kubernetes-endpoint"
	// PortName is the port name the apiserver publishes (pkg/controlplane/controller/kubernetesservice
	// names the Service's port "https"; kube-proxy matches endpoints to it by name).
	PortName = "https"
	// ManagedByValue is the value of discoveryv1.LabelManagedBy on the EndpointSlice, and of
	// EndpointsManagedByLabel on the Endpoints, that skewgate writes (discovery.SkewgateManagedBy).
	ManagedByValue = discovery.SkewgateManagedBy
	// EndpointsManagedByLabel marks Endpoints skewgate wrote. The apiserver's reconciler keeps other
	// labels of the Endpoints but rebuilds the EndpointSlice's, so only the slice's mark tells a rival's
	// write from skewgate's.
	EndpointsManagedByLabel = "app.kubernetes.io/managed-by"
)

// Bounds of Config.TTL (and of what a member Lease's leaseDurationSeconds may say).
const (
	MinTTL, MaxTTL = 5 * time.Second, 5 * time.Minute
	// DefaultTTL is the apiserver reconciler's (--endpoint-reconciler-type=lease: 15s, renewed every 10s).
	DefaultTTL = 15 * time.Second
)

// Rival backoff: the first wait after a rival write and the longest.
const (
	rivalBackoffMin, rivalBackoffMax = 5 * time.Second, 5 * time.Minute
)

// Topologies is what kubesvc reads from discovery: the current Topology and a change notification.
type Topologies interface {
	Watch() (*discovery.Topology, <-chan struct{})
}

// ProbeFunc checks that the front at endpoint answers (see TLSProbe).
type ProbeFunc func(ctx context.Context, endpoint netip.AddrPort) error

// Config configures a Controller.
type Config struct {
	Client kubernetes.Interface
	Source Topologies
	// Member names this node's Lease (its host name by default); Endpoint is its front as clients
	// reach it (an IPv4 address and the front port).
	Member   string
	Endpoint netip.AddrPort
	// TTL is the Lease duration; the Lease is renewed every TTL/3 [DefaultTTL].
	TTL time.Duration
	// AllowedCIDRs: member addresses besides the apiservers' own that are accepted.
	AllowedCIDRs []netip.Prefix
	// MaxMembers caps the member Leases considered; past it they are ignored and counted [64].
	MaxMembers int
	// Probe checks the local front before every renewal [nil: the Lease is never renewed].
	Probe ProbeFunc
	// ShutdownTimeout bounds the removal of this member on shutdown [10s].
	ShutdownTimeout time.Duration

	Logger *zap.Logger
	// Metrics are shared with serve's registry (NewMetrics); nil: registered on Registry.
	Metrics  *Metrics
	Registry prometheus.Registerer
	// Clock observes member Leases, times renewals, expiry and the rival backoff [clock.RealClock].
	Clock clock.WithTicker
}

func (c *Config) defaults() error {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxMembers <= 0 {
		c.MaxMembers = discovery.DefaultMaxUpstreams
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(c.Registry)
	}
	switch {
	case c.Client == nil:
		return errors.New("kubesvc: Config.Client is required")
	case c.Source == nil:
		return errors.New("kubesvc: Config.Source (discovery) is required")
	case c.Member == "":
		return errors.New("kubesvc: Config.Member is required")
	case c.TTL < MinTTL || c.TTL > MaxTTL:
		return fmt.Errorf("kubesvc: TTL %v must be from %v to %v", c.TTL, MinTTL, MaxTTL)
	}
	if reason, err := checkEndpointAddr(c.Endpoint); err != nil {
		return fmt.Errorf("kubesvc: this member's endpoint %s (%s): %w", c.Endpoint, reason, err)
	}
	return nil
}
