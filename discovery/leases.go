package discovery

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Facts of the identity Lease contract (k8s.io/apiserver pkg/controlplane/apiserver, REFERENCE.md §2).
const (
	IdentityLabelSelector = "apiserver.kubernetes.io/identity=kube-apiserver"
	HostnameLabel         = "kubernetes.io/hostname"
	PeerAddressAnnotation = "kubernetes.io/peer-advertise-address"
	LeaseNamespace        = "kube-system"
)

// candidate is an upstream to run a worker for.
type candidate struct {
	Name      string
	Address   string
	Source    Source
	LeaseName string
	Holder    string
}

// rejection is a Lease that cannot be routed to.
type rejection struct {
	Lease, Annotation, Reason string
	Err                       error
}

// leaseView is the result of reading the identity Leases at one instant.
type leaseView struct {
	candidates []candidate // sorted by name
	rejected   []rejection
	// unaddressed are live Leases with neither an allowed annotation nor a static entry.
	unaddressed []string
	// nextExpiry is when the earliest live Lease goes stale if not renewed (zero: none).
	nextExpiry time.Time
}

// readLeases turns identity Leases, static upstreams and the address policy into upstreams. A Lease is
// live while renewTime+staleAfter is in the future: a SIGKILLed apiserver leaves its Lease for an
// hour, so only renewals prove it is there. Static upstreams are always upstreams; a live Lease whose
// hostname matches one adds its identity to it.
//
// A Lease that looks stale still counts while its apiserver answers our own /readyz probes
// (answering names the upstreams whose probes succeed): our view of Leases can stall while every
// apiserver is fine, for instance while the apiserver our informers watch drains its connections
// during a graceful shutdown (a minute on the testbed), and all Leases would look stale at once.
func readLeases(leases []*coordinationv1.Lease, static []StaticUpstream, policy AddressPolicy, endpoints []netip.AddrPort, now time.Time, staleAfter time.Duration, answering map[string]bool) leaseView {
	var v leaseView
	trusted := map[netip.AddrPort]bool{}
	for _, ep := range endpoints {
		trusted[ep] = true
	}
	byName := map[string]*candidate{}
	for _, s := range static {
		if ap, err := netip.ParseAddrPort(s.Address); err == nil {
			trusted[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
		}
		byName[s.Name] = &candidate{Name: s.Name, Address: s.Address, Source: SourceStatic}
	}
	for _, l := range leases {
		if l.Spec.RenewTime == nil {
			continue
		}
		host := l.Labels[HostnameLabel]
		if !nameRE.MatchString(host) {
			host = l.Name // a Lease name is a DNS subdomain already
		}
		expiry := l.Spec.RenewTime.Add(staleAfter)
		if !expiry.After(now) {
			if !answering[host] {
				continue
			}
		} else if v.nextExpiry.IsZero() || expiry.Before(v.nextExpiry) {
			v.nextExpiry = expiry
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if c, ok := byName[host]; ok {
			if c.Source == SourceStatic {
				c.Source, c.LeaseName, c.Holder = SourceLeaseStatic, l.Name, holder
			}
			continue
		}
		ann, ok := l.Annotations[PeerAddressAnnotation]
		if !ok {
			v.unaddressed = append(v.unaddressed, l.Name)
			continue
		}
		ap, reason, err := policy.check(ann, trusted)
		if err != nil {
			v.rejected = append(v.rejected, rejection{Lease: l.Name, Annotation: ann, Reason: reason, Err: err})
			continue
		}
		byName[host] = &candidate{Name: host, Address: ap.String(), Source: SourceLease, LeaseName: l.Name, Holder: holder}
	}
	for _, c := range byName {
		v.candidates = append(v.candidates, *c)
	}
	slices.SortFunc(v.candidates, func(a, b candidate) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(v.unaddressed)
	return v
}
