package xds

import (
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

// Resources is the Envoy configuration for one Topology.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	// Clusters sorted by name.
	Clusters []*clusterv3.Cluster
	// Secrets are the TLS files Envoy loads and watches (SDS with file paths).
	Secrets []*tlsv3.Secret
	// Unexpressed lists the rows of the decision table the route table cannot carry: ext_proc
	// decides them, and while it fails open they take the default (or schema) routes. The server logs, counts and shows them (/topology).
	Unexpressed []UnexpressedKey
}

// UnexpressedKey is a row of the decision table with no route of its own in Envoy's route table:
// a skewed resource key, or an OpenAPI v3 document key; and why.
type UnexpressedKey struct {
	Key     discovery.ResourceKey `json:"key"`
	OpenAPI string                `json:"openapi,omitempty"`
	Reason  string                `json:"reason"`
}

// String names the key for people.
func (u UnexpressedKey) String() string {
	if u.OpenAPI != "" {
		return "/openapi/v3/" + u.OpenAPI
	}
	return u.Key.String()
}

// ClusterNames returns the names of rs.Clusters.
func (rs *Resources) ClusterNames() []string {
	out := make([]string, len(rs.Clusters))
	for i, c := range rs.Clusters {
		out[i] = c.Name
	}
	return out
}

// Translate turns a Topology into Envoy resources. It is pure: the same Topology and Options give the
// same resources. A nil Topology (discovery not synced) is an error: there is nothing true to say yet,
// and an Envoy must keep its last configuration rather than get an empty one.
func Translate(t *discovery.Topology, o Options) (*Resources, error) {
	o = o.WithDefaults()
	if err := validateOptions(o); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errors.New("no Topology yet: nothing to translate")
	}
	tb := &translator{o: o}
	clusters, err := tb.clusters(t)
	if err != nil {
		return nil, err
	}

	tb.top = t
	rc, unexpressed, err := tb.routeConfig()
	if err != nil {
		return nil, err
	}
	l, err := tb.listener()
	if err != nil {
		return nil, err
	}
	rs := &Resources{Listeners: []*listenerv3.Listener{l}, Routes: []*routev3.RouteConfiguration{rc}, Clusters: clusters, Secrets: tb.secrets(), Unexpressed: unexpressed}
	if err := rs.check(); err != nil {
		return nil, err
	}
	return rs, nil
}

// check validates every resource (a part many clusters share once: validate.go) and that every
// cluster a route names statically exists; the snapshot's Consistent() only checks EDS and RDS names.
func (rs *Resources) check() error {
	names := make(map[string]bool, len(rs.Clusters))
	v := newSharedValidator[*clusterv3.Cluster]()
	for _, c := range rs.Clusters {
		if err := v.validate(c); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		names[c.Name] = true
	}
	for _, l := range rs.Listeners {
		if err := l.ValidateAll(); err != nil {
			return fmt.Errorf("listener %s: %w", l.Name, err)
		}
	}
	for _, rc := range rs.Routes {
		if err := rc.ValidateAll(); err != nil {
			return fmt.Errorf("route configuration %s: %w", rc.Name, err)
		}
		for _, vh := range rc.VirtualHosts {
			for _, r := range vh.Routes {
				if c := r.GetRoute().GetCluster(); c != "" && !names[c] {
					return fmt.Errorf("route %s names cluster %q, which does not exist", r.Name, c)
				}
			}
		}
	}
	secrets := map[string]bool{}
	for _, sec := range rs.Secrets {
		if err := sec.ValidateAll(); err != nil {
			return fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		secrets[sec.Name] = true
	}
	refs, err := sdsReferences(rs)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if !secrets[ref] {
			return fmt.Errorf("secret %q is referenced but not served", ref)
		}
	}
	if !names[wire.ExtProcCluster] {
		return fmt.Errorf("ext_proc cluster %q missing", wire.ExtProcCluster)
	}
	return nil
}

type translator struct {
	o Options
	// top is the Topology, whose decision table the routes are emitted from (skewtable.go).
	top *discovery.Topology
	// upstreams are the endpoints of t's upstreams by name, shapes and sockets the parts every
	// apiserver cluster of a kind shares (clusters.go): each built once per translation.
	upstreams map[string]*upstreamEndpoint
	shapes    [numClusterKinds]*apiserverShape
	sockets   map[socketKey]*corev3.TransportSocket
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sdsReferences lists every secret name the listeners and clusters reference (the snapshot's
// Consistent() does not check SDS names). A transport socket many clusters share is read once.
func sdsReferences(rs *Resources) ([]string, error) {
	seen := map[*corev3.TransportSocket]bool{}
	var sockets []*corev3.TransportSocket
	add := func(ts *corev3.TransportSocket) {
		if ts != nil && !seen[ts] {
			seen[ts] = true
			sockets = append(sockets, ts)
		}
	}
	for _, c := range rs.Clusters {
		add(c.TransportSocket)
		for _, m := range c.TransportSocketMatches {
			add(m.TransportSocket)
		}
	}
	for _, l := range rs.Listeners {
		for _, fc := range l.FilterChains {
			add(fc.TransportSocket)
		}
	}
	var out []string
	for _, ts := range sockets {
		names, err := SecretNames(ts)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}

// SecretNames lists the SDS secrets a TLS transport socket (upstream or downstream) names: its
// certificates and its validation context, plain or combined. A socket of another type names none; a
// typed config that does not unmarshal is an error, never "no secrets" (which would let the
// referenced-but-not-served check pass).
func SecretNames(ts *corev3.TransportSocket) ([]string, error) {
	if ts == nil {
		return nil, nil
	}
	m, err := ts.GetTypedConfig().UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("transport socket %q: %w", ts.GetName(), err)
	}
	var c *tlsv3.CommonTlsContext
	switch ctx := m.(type) {
	case *tlsv3.UpstreamTlsContext:
		c = ctx.CommonTlsContext
	case *tlsv3.DownstreamTlsContext:
		c = ctx.CommonTlsContext
	default:
		return nil, nil
	}
	var out []string
	for _, s := range c.GetTlsCertificateSdsSecretConfigs() {
		out = append(out, s.Name)
	}
	if s := c.GetValidationContextSdsSecretConfig(); s != nil {
		out = append(out, s.Name)
	}
	if s := c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); s != nil {
		out = append(out, s.Name)
	}
	return out, nil
}
