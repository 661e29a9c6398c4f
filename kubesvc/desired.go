package kubesvc

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/discovery"
)

// desired is the set every member computes from the same inputs: sorted, so members agree.
type desired struct {
	ips      []string // sorted as strings, like the apiserver's sets.List
	port     int32
	fallback bool // the apiservers' own addresses: no member is live
}

// desiredSet is the live members' endpoints, or, when none is live, the ready apiservers'
// addresses (never worse than the apiservers' own reconciler), or nothing: then the objects are left
// as they are, never emptied (the lease reconciler never writes an empty set either).
func desiredSet(live []member, port uint16, t *discovery.Topology) desired {
	if len(live) > 0 {
		seen := map[string]bool{}
		var ips []string
		for _, m := range live {
			if s := m.endpoint.Addr().String(); !seen[s] {
				seen[s] = true
				ips = append(ips, s)
			}
		}
		sort.Strings(ips)
		return desired{ips: ips, port: int32(port)}
	}
	ips, p := fallbackSet(t)
	return desired{ips: ips, port: p, fallback: true}
}

// fallbackSet is the ready apiservers' addresses the apiserver itself could publish. One Endpoints
// subset and one EndpointSlice carry one port, so when the apiservers' ports differ the most common
// one is kept (the lowest on a tie) with its addresses.
func fallbackSet(t *discovery.Topology) ([]string, int32) {
	if t == nil {
		return nil, 0
	}
	byPort := map[uint16][]string{}
	seen := map[netip.Addr]bool{}
	for _, u := range t.Upstreams {
		ap, err := netip.ParseAddrPort(u.Address)
		if !u.Ready || err != nil {
			continue // a static upstream named by DNS has no address to publish
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if _, err := checkEndpointAddr(ap); err != nil || seen[ap.Addr()] {
			continue
		}
		seen[ap.Addr()] = true
		byPort[ap.Port()] = append(byPort[ap.Port()], ap.Addr().String())
	}
	var best uint16
	for p, ips := range byPort {
		if best == 0 || len(ips) > len(byPort[best]) || (len(ips) == len(byPort[best]) && p < best) {
			best = p
		}
	}
	ips := byPort[best]
	sort.Strings(ips)
	return ips, int32(best)
}

// apiserverAddrs are the apiservers discovery knows, proven or not or only by an identity Lease it
// ignored, by name (the identity Lease's hostname or the static upstream's name): a member Lease must carry one of these names, and its
// address must be that apiserver's (or in a --kubernetes-endpoints-cidr). An apiserver whose address
// is a DNS name maps to the zero address: only a --kubernetes-endpoints-cidr can admit its front.
// Names are lowercased, as the member name (a Lease name) is.
func apiserverAddrs(t *discovery.Topology) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	if t == nil {
		return out
	}
	for _, us := range [][]discovery.Upstream{t.Upstreams, t.Unproven} {
		for _, u := range us {
			var a netip.Addr
			if ap, err := netip.ParseAddrPort(u.Address); err == nil {
				a = ap.Addr().Unmap()
			}
			// Lease names are lowercase; a host name need not be. Two apiservers whose names
			// differ only in case leave that name to --kubernetes-endpoints-cidr alone.
			name := strings.ToLower(u.Name)
			if prev, ok := out[name]; ok && prev != a {
				a = netip.Addr{}
			}
			out[name] = a
		}
	}
	// An apiserver whose identity Lease names no address discovery accepts (apiservers before 1.36
	// write none) is known by name only: only a --kubernetes-endpoints-cidr can admit its front.
	for _, l := range t.Ignored {
		if l.Reason != discovery.IgnoredNoAddress {
			continue // contested, past --max-upstreams: no apiserver discovery vouches for
		}
		if name := strings.ToLower(l.Hostname); name != "" {
			if _, ok := out[name]; !ok {
				out[name] = netip.Addr{}
			}
		}
	}
	return out
}

func (d desired) String() string {
	s := ""
	for i, ip := range d.ips {
		if i > 0 {
			s += ","
		}
		s += ip
	}
	return s + " port " + strconv.Itoa(int(d.port))
}

// The objects below are what the apiserver's lease reconciler writes, field by field
// (k8s.io/kubernetes v1.36.3: pkg/controlplane/reconcilers/lease.go doReconcile and
// endpointsadapter.go endpointSliceFromEndpoints; the port is
// pkg/controlplane/controller/kubernetesservice createEndpointPortSpec, {TCP, port, "https"}):
//   - Endpoints: the current object, label endpointslice.kubernetes.io/skip-mirror=true added (other
//     labels kept), exactly one subset: the addresses sorted byte-wise (RepackSubsets), the one port.
//   - EndpointSlice: labels exactly kubernetes.io/service-name=kubernetes, addressType IPv4, one
//     endpoint per address with conditions.ready=true, the port of the Endpoints.
//
// skewgate adds one label to each, its managed-by mark, and to the slice the annotation naming the
// member that wrote it. The apiserver rebuilds the EndpointSlice's
// labels from scratch on every write, so a slice without the mark was written by someone else
// (rival.go); on the Endpoints it keeps other labels, so only the slice can tell.

func endpointPorts(port int32) []corev1.EndpointPort {
	return []corev1.EndpointPort{{Name: PortName, Port: port, Protocol: corev1.ProtocolTCP}}
}

// wantEndpoints is cur rewritten to d.
func wantEndpoints(cur *corev1.Endpoints, d desired) *corev1.Endpoints {
	e := cur.DeepCopy()
	if e.Labels == nil {
		e.Labels = map[string]string{}
	}
	e.Labels[discoveryv1.LabelSkipMirror] = "true"
	e.Labels[EndpointsManagedByLabel] = ManagedByValue
	addrs := make([]corev1.EndpointAddress, len(d.ips))
	for i, ip := range d.ips {
		addrs[i].IP = ip
	}
	e.Subsets = []corev1.EndpointSubset{{Addresses: addrs, Ports: endpointPorts(d.port)}}
	return e
}

// wantSlice is cur rewritten to d by member.
func wantSlice(cur *discoveryv1.EndpointSlice, d desired, member string) *discoveryv1.EndpointSlice {
	s := cur.DeepCopy()
	// Which member wrote it: not compared (sliceEqual), so members that agree never rewrite it.
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[WriterAnnotation] = member
	s.Labels = map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: ManagedByValue}
	s.AddressType = discoveryv1.AddressTypeIPv4
	s.Endpoints = make([]discoveryv1.Endpoint, len(d.ips))
	for i, ip := range d.ips {
		s.Endpoints[i] = discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	p := endpointPorts(d.port)[0]
	s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To(p.Name), Port: ptr.To(p.Port), Protocol: ptr.To(p.Protocol)}}
	return s
}

// The comparisons are the apiserver's: lease.go compares the Endpoints' subset and its skip-mirror
// label, EnsureEndpointSliceFromEndpoints the slice's endpoints, ports and labels (and addressType).
func endpointsEqual(a, b *corev1.Endpoints) bool {
	return apiequality.Semantic.DeepEqual(a.Subsets, b.Subsets) && apiequality.Semantic.DeepEqual(a.Labels, b.Labels)
}

func sliceEqual(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && apiequality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		apiequality.Semantic.DeepEqual(a.Ports, b.Ports) && apiequality.Semantic.DeepEqual(a.Labels, b.Labels)
}

// markedSlice: skewgate (this member or another) wrote the slice last.
func markedSlice(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == ManagedByValue
}
