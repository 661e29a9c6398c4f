package discovery

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
)

// StaticUpstream is an operator-configured apiserver. Its Name matches the kubernetes.io/hostname
// label of the apiserver's identity Lease, which is how apiservers older than 1.36 (no
// peer-advertise-address annotation) get an address.
type StaticUpstream struct {
	Name    string
	Address string // host:port; host may be an IP or a DNS name
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// AddressPolicy decides whether an address written into a Lease annotation may be routed to. Anyone
// who can write Leases in kube-system can write that annotation, so it is only a hint (KEP-4020
// refused to route by user-writable addresses): it must be an IP literal and must be allowed by a
// CIDR, equal a static upstream, or be an endpoint of the default/kubernetes EndpointSlice.
type AddressPolicy struct {
	CIDRs []netip.Prefix
}

// SkewgateManagedBy is the endpointslice.kubernetes.io/managed-by value on the kubernetes
// EndpointSlice that skewgate writes (package kubesvc); TrustEndpointSlice never trusts such a slice.
const SkewgateManagedBy = "kubesvc.skewgate.io"

// Rejection reasons, a bounded set (metric label values).
const (
	RejectMalformed  = "malformed"
	RejectNotAllowed = "not_allowed"
)

var errNotAllowed = errors.New("address is not in an --allowed-cidr, not a --static-upstream and not a default/kubernetes endpoint")

// maxAnnotationLen bounds what we even try to parse.
const maxAnnotationLen = 64

// check parses an annotated address and applies the policy. trusted holds the static upstream
// addresses and the default/kubernetes endpoints.
func (p AddressPolicy) check(annotation string, trusted map[netip.AddrPort]bool) (netip.AddrPort, string, error) {
	if len(annotation) > maxAnnotationLen {
		return netip.AddrPort{}, RejectMalformed, fmt.Errorf("address annotation is %d bytes long", len(annotation))
	}
	ap, err := netip.ParseAddrPort(annotation)
	if err != nil {
		return netip.AddrPort{}, RejectMalformed, fmt.Errorf("address %q is not ip:port: %v", annotation, err)
	}
	a := ap.Addr()
	if ap.Port() == 0 || !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
		return netip.AddrPort{}, RejectMalformed, fmt.Errorf("address %q cannot be an apiserver", annotation)
	}
	ap = netip.AddrPortFrom(a.Unmap(), ap.Port())
	if trusted[ap] {
		return ap, "", nil
	}
	for _, c := range p.CIDRs {
		if c.Contains(ap.Addr()) {
			return ap, "", nil
		}
	}
	return netip.AddrPort{}, RejectNotAllowed, fmt.Errorf("address %q: %w", annotation, errNotAllowed)
}
