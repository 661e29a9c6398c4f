package discovery

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Facts of the identity Lease contract (k8s.io/apiserver pkg/server/config.go and
// pkg/controlplane/apiserver; checked against real v1.35 and v1.36 apiservers by test/testbed).
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
	created   time.Time // the Lease's creation (zero for static upstreams)
}

// rejection is a Lease whose address the policy refuses.
type rejection struct {
	Lease, Annotation, Reason string
	Err                       error
}

// leaseView is the result of reading the identity Leases at one instant.
type leaseView struct {
	candidates []candidate // sorted by name
	rejected   []rejection
	// ignored are the live Leases that are no upstream, sorted by Lease name: no address, a contested
	// hostname, over --max-upstreams, or an address the policy refuses.
	ignored []IgnoredLease
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
//
// Two live Leases claiming one hostname are resolved without looking at the order the lister
// returns them in: the Lease named the way the apiserver names its own (identityLeaseName) wins;
// without one, the hostname is refused while it is contested.
func readLeases(leases []*coordinationv1.Lease, static []StaticUpstream, policy AddressPolicy, endpoints []netip.AddrPort, now time.Time, staleAfter time.Duration, answering map[string]bool) leaseView {
	var v leaseView
	trusted, byName := staticCandidates(static, endpoints)
	hosts, byHost := liveLeasesByHost(&v, leases, now, staleAfter, answering)
	for _, host := range hosts {
		l, ok := v.trustedClaim(host, byHost[host])
		if !ok {
			continue
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
		if ap, ok := v.leaseAddress(l, host, policy, trusted); ok {
			byName[host] = &candidate{Name: host, Address: ap.String(), Source: SourceLease, LeaseName: l.Name, Holder: holder, created: l.CreationTimestamp.Time}
		}
	}
	for _, c := range byName {
		v.candidates = append(v.candidates, *c)
	}
	slices.SortFunc(v.candidates, func(a, b candidate) int { return strings.Compare(a.Name, b.Name) })
	sortIgnored(v.ignored)
	return v
}

// staticCandidates returns the addresses a Lease annotation may name without a CIDR (the
// EndpointSlice's and the static upstreams'), and a candidate per static upstream by name.
func staticCandidates(static []StaticUpstream, endpoints []netip.AddrPort) (map[netip.AddrPort]bool, map[string]*candidate) {
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
	return trusted, byName
}

// liveLeasesByHost groups the live Leases (and the stale ones of apiservers still answering our
// probes) by hostname, the hostnames sorted, and records the earliest expiry in v.
func liveLeasesByHost(v *leaseView, leases []*coordinationv1.Lease, now time.Time, staleAfter time.Duration, answering map[string]bool) ([]string, map[string][]*coordinationv1.Lease) {
	byHost := map[string][]*coordinationv1.Lease{}
	var hosts []string
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
		if byHost[host] == nil {
			hosts = append(hosts, host)
		}
		byHost[host] = append(byHost[host], l)
	}
	slices.Sort(hosts)
	return hosts, byHost
}

// trustedClaim picks the Lease trusted for host among the live ones that claim it: the only one, or
// the one named as the apiserver names its own (every other is ignored as contested); none if
// several claim it and none has that name.
func (v *leaseView) trustedClaim(host string, claims []*coordinationv1.Lease) (*coordinationv1.Lease, bool) {
	if len(claims) == 1 {
		return claims[0], true
	}
	slices.SortFunc(claims, func(a, b *coordinationv1.Lease) int { return strings.Compare(a.Name, b.Name) })
	want := identityLeaseName(host)
	i := slices.IndexFunc(claims, func(l *coordinationv1.Lease) bool { return l.Name == want })
	for j, c := range claims {
		if j != i {
			v.ignored = append(v.ignored, IgnoredLease{Lease: c.Name, Hostname: host, Reason: IgnoredContested,
				Hint: "another live identity Lease claims this kubernetes.io/hostname; only " + want + " (the name the apiserver gives its own Lease) is trusted for it"})
		}
	}
	if i < 0 {
		return nil, false
	}
	return claims[i], true
}

// leaseAddress is the address l's annotation names, if it has one the policy allows; otherwise the
// Lease is ignored (and a refused address recorded as a rejection).
func (v *leaseView) leaseAddress(l *coordinationv1.Lease, host string, policy AddressPolicy, trusted map[netip.AddrPort]bool) (netip.AddrPort, bool) {
	ann, ok := l.Annotations[PeerAddressAnnotation]
	if !ok {
		v.ignored = append(v.ignored, IgnoredLease{Lease: l.Name, Hostname: host, Reason: IgnoredNoAddress,
			Hint: "no " + PeerAddressAnnotation + " annotation (apiservers before 1.36 write none): add --static-upstream=" + host + "=<ip>:<port>"})
		return netip.AddrPort{}, false
	}
	ap, reason, err := policy.check(ann, trusted)
	if err != nil {
		v.rejected = append(v.rejected, rejection{Lease: l.Name, Annotation: ann, Reason: reason, Err: err})
		v.ignored = append(v.ignored, IgnoredLease{Lease: l.Name, Hostname: host, Reason: reason,
			Hint: "the address annotation is refused by the address policy (--allowed-cidr, --static-upstream, the default/kubernetes EndpointSlice)"})
		return netip.AddrPort{}, false
	}
	return ap, true
}

// limit keeps at most maxUpstreams candidates and moves the others to ignored. Static upstreams are
// kept first (the operator named them), then the upstreams that already run (known), so a flood of
// new Leases cannot push out the apiservers in use; then the oldest Leases.
func (v *leaseView) limit(maxUpstreams int, known map[string]bool) {
	if maxUpstreams <= 0 || len(v.candidates) <= maxUpstreams {
		return
	}
	rank := func(c candidate) int {
		switch {
		case c.Source != SourceLease:
			return 0
		case known[c.Name]:
			return 1
		}
		return 2
	}
	order := slices.Clone(v.candidates)
	slices.SortStableFunc(order, func(a, b candidate) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return a.created.Compare(b.created) // stable: equal times keep name order
	})
	keep := map[string]bool{}
	for _, c := range order[:maxUpstreams] {
		keep[c.Name] = true
	}
	v.candidates = slices.DeleteFunc(v.candidates, func(c candidate) bool {
		if keep[c.Name] {
			return false
		}
		v.ignored = append(v.ignored, IgnoredLease{Lease: c.LeaseName, Hostname: c.Name, Reason: IgnoredMaxUpstreams,
			Hint: "more upstreams than --max-upstreams; raise it if these are real apiservers"})
		return true
	})
	sortIgnored(v.ignored)
}

func sortIgnored(in []IgnoredLease) {
	slices.SortFunc(in, func(a, b IgnoredLease) int { return strings.Compare(a.Lease, b.Lease) })
}

// identityLeaseName is the name an apiserver gives its own identity Lease: "apiserver-" and the
// lowercase unpadded base32 of the first 16 bytes of a SHA-256 over the hostname and
// "kube-apiserver", each prefixed by its 16-bit length (k8s.io/apiserver pkg/server/config.go,
// NewConfig). A Lease of another name that claims the hostname was not written by that apiserver.
func identityLeaseName(host string) string {
	var data []byte
	for _, part := range []string{host, "kube-apiserver"} {
		data = binary.BigEndian.AppendUint16(data, uint16(len(part)))
		data = append(data, part...)
	}
	sum := sha256.Sum256(data)
	return "apiserver-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}
