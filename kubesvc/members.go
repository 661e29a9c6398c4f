package kubesvc

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
)

// Why a member Lease is ignored (label values of skewgate_kubesvc_bad_member_leases_total). Anyone
// who can write Leases in the skewgate namespace can write a member Lease, so its endpoint is a claim
// checked against what discovery already trusts, never a fact.
const (
	BadMalformed  = "malformed"   // endpoint annotation missing, too long, or not IPv4:port
	BadAddress    = "address"     // loopback, link-local, unspecified, multicast or broadcast
	BadNotAllowed = "not_allowed" // not the address of an apiserver discovery knows, nor in an --allowed-cidr
	BadPort       = "port"        // not the front port (one Endpoints subset carries one port for all)
	BadMaxMembers = "max_members" // past the cap on members
)

var badReasons = []string{BadMalformed, BadAddress, BadNotAllowed, BadPort, BadMaxMembers}

// maxAnnotationLen bounds what is parsed: "255.255.255.255:65535" is 21 bytes.
const maxAnnotationLen = 32

// member is a valid member Lease.
type member struct {
	name     string
	endpoint netip.AddrPort
	duration time.Duration // the Lease's leaseDurationSeconds, within [MinTTL, MaxTTL]
}

// rejection is an ignored member Lease: why, and the annotation it carried (logged once per change).
type rejection struct {
	reason, annotation string
	err                error
}

// parseEndpoint reads an endpoint annotation.
func parseEndpoint(s string) (netip.AddrPort, string, error) {
	if len(s) > maxAnnotationLen {
		return netip.AddrPort{}, BadMalformed, fmt.Errorf("endpoint annotation is %d bytes long", len(s))
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, BadMalformed, fmt.Errorf("endpoint %q is not IPv4:port", s)
	}
	if reason, err := checkEndpointAddr(ap); err != nil {
		return netip.AddrPort{}, reason, err
	}
	return ap, "", nil
}

// checkEndpointAddr refuses what the apiserver refuses in an endpoint (core validation: no
// loopback, link-local or link-local multicast; pkg/apis/core/validation ValidateEndpointIP) and what
// no front can be.
func checkEndpointAddr(ap netip.AddrPort) (string, error) {
	a := ap.Addr()
	switch {
	case !a.IsValid() || !a.Is4():
		return BadMalformed, fmt.Errorf("%s is not IPv4:port (the kubernetes EndpointSlice is IPv4)", ap)
	case ap.Port() == 0:
		return BadMalformed, errors.New("port 0")
	case a.IsUnspecified(), a.IsLoopback(), a.IsLinkLocalUnicast(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return BadAddress, fmt.Errorf("%s cannot be an endpoint (unspecified, loopback, link-local, multicast or broadcast)", a)
	}
	return "", nil
}

// memberPolicy decides which member Leases count.
type memberPolicy struct {
	port uint16 // the front port: every member's
	// trusted are the apiservers' addresses discovery knows (fronts run beside apiservers).
	trusted map[netip.Addr]bool
	cidrs   []netip.Prefix
	max     int
	ttl     time.Duration // for a Lease without leaseDurationSeconds
}

// validate returns the valid member Leases sorted by name, at most max of them, and why each other
// one was ignored, by Lease name.
func (p memberPolicy) validate(leases []*coordinationv1.Lease) ([]member, map[string]rejection) {
	sorted := append([]*coordinationv1.Lease(nil), leases...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var out []member
	bad := map[string]rejection{}
	for _, l := range sorted {
		ann, ok := l.Annotations[EndpointAnnotation]
		if !ok {
			bad[l.Name] = rejection{reason: BadMalformed, err: errors.New("no " + EndpointAnnotation + " annotation")}
			continue
		}
		if len(ann) > maxAnnotationLen {
			ann = ann[:maxAnnotationLen] // kept for the log line only: bounded
			bad[l.Name] = rejection{BadMalformed, ann, fmt.Errorf("endpoint annotation is %d bytes long", len(l.Annotations[EndpointAnnotation]))}
			continue
		}
		ap, reason, err := parseEndpoint(ann)
		switch {
		case err != nil:
		case ap.Port() != p.port:
			reason, err = BadPort, fmt.Errorf("port %d, but the fronts serve on %d", ap.Port(), p.port)
		case !p.allowed(ap.Addr()):
			reason, err = BadNotAllowed, fmt.Errorf("%s is no apiserver's address and in no --allowed-cidr", ap.Addr())
		case len(out) >= p.max:
			reason, err = BadMaxMembers, fmt.Errorf("more than %d member Leases", p.max)
		}
		if err != nil {
			bad[l.Name] = rejection{reason, ann, err}
			continue
		}
		d := p.ttl
		if s := l.Spec.LeaseDurationSeconds; s != nil {
			d = min(max(time.Duration(*s)*time.Second, MinTTL), MaxTTL)
		}
		out = append(out, member{name: l.Name, endpoint: ap, duration: d})
	}
	return out, bad
}

func (p memberPolicy) allowed(a netip.Addr) bool {
	if p.trusted[a] {
		return true
	}
	for _, c := range p.cidrs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// observer tells a live member from a dead one by this process's clock, as client-go's leader
// election does (tools/leaderelection: observedTime is when the record was last seen to change): a
// member is live while its renewal was seen to change within its Lease duration. The renewTime a
// member writes is only compared with itself, never with this clock, so clock skew between nodes
// cannot flap the set.
type observer struct {
	clock clock.PassiveClock
	seen  map[string]observation
}

type observation struct {
	renewal string // renewTime and holder as last read
	at      time.Time
}

func newObserver(c clock.PassiveClock) *observer {
	return &observer{clock: c, seen: map[string]observation{}}
}

// observe notes every Lease whose renewal changed (or that is new) as renewed now, and forgets
// the Leases that are gone: memory is bounded by the Leases that exist.
func (o *observer) observe(leases []*coordinationv1.Lease) {
	now := o.clock.Now()
	keep := make(map[string]observation, len(leases))
	for _, l := range leases {
		if l.Spec.RenewTime == nil {
			continue // never renewed: never live
		}
		r := l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		if l.Spec.HolderIdentity != nil {
			r += "/" + *l.Spec.HolderIdentity
		}
		if prev, ok := o.seen[l.Name]; ok && prev.renewal == r {
			keep[l.Name] = prev
			continue
		}
		keep[l.Name] = observation{renewal: r, at: now}
	}
	o.seen = keep
}

// expiry is when member m stops being live (the zero time: it never was).
func (o *observer) expiry(m member) time.Time {
	ob, ok := o.seen[m.name]
	if !ok {
		return time.Time{}
	}
	return ob.at.Add(m.duration)
}
