package discovery

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(name, host, addr string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace,
		Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", HostnameLabel: host}}}
	if addr != "" {
		l.Annotations = map[string]string{PeerAddressAnnotation: addr}
	}
	holder := name + "_0d1f"
	l.Spec.HolderIdentity = &holder
	if !renewed.IsZero() {
		l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	}
	return l
}

func TestReadLeases(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	fresh := now.Add(-5 * time.Second)
	policy := AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}
	static := []StaticUpstream{{Name: "old", Address: "10.9.0.1:6443"}, {Name: "lonely", Address: "cp3.example:6443"}}
	endpoints := []netip.AddrPort{netip.MustParseAddrPort("192.168.7.7:6443")}
	leases := []*coordinationv1.Lease{
		lease("apiserver-old", "old", "", fresh),                                     // matched to static by hostname
		lease("apiserver-new", "new", "10.0.0.2:6443", fresh),                        // allowed by CIDR
		lease("apiserver-ep", "ep", "192.168.7.7:6443", fresh),                       // allowed: default/kubernetes endpoint
		lease("apiserver-st", "st", "10.9.0.1:6443", fresh),                          // allowed: equals a static address
		lease("apiserver-stale", "stale", "10.0.0.3:6443", now.Add(-31*time.Second)), // gone
		lease("apiserver-never", "never", "10.0.0.4:6443", time.Time{}),              // never renewed
		lease("apiserver-evil", "evil", "10.1.0.9:6443", fresh),                      // outside the policy
		lease("apiserver-meta", "meta", "169.254.169.254:80", fresh),                 // SSRF classic
		lease("apiserver-dns", "dns", "localhost:6443", fresh),                       // names are not accepted
		lease("apiserver-url", "url", "https://10.0.0.5:6443", fresh),                // not ip:port
		lease("apiserver-zero", "zero", "10.0.0.6:0", fresh),                         // port 0
		lease("apiserver-any", "any", "0.0.0.0:6443", fresh),                         // unspecified
		lease("apiserver-long", "long", "10.0.0.7:6443"+strings.Repeat(" ", 10000), fresh),
		lease("apiserver-noaddr", "noaddr", "", fresh), // 1.35 without a static entry
	}
	v := readLeases(leases, static, policy, endpoints, now, 30*time.Second, nil)

	var got []string
	for _, c := range v.candidates {
		got = append(got, c.Name+"="+c.Address+"/"+string(c.Source))
	}
	want := []string{"ep=192.168.7.7:6443/lease", "lonely=cp3.example:6443/static", "new=10.0.0.2:6443/lease",
		"old=10.9.0.1:6443/lease+static", "st=10.9.0.1:6443/lease"}
	if !slices.Equal(got, want) {
		t.Errorf("candidates:\n got %v\nwant %v", got, want)
	}
	reasons := map[string]string{}
	for _, r := range v.rejected {
		reasons[r.Lease] = r.Reason
	}
	wantRej := map[string]string{
		"apiserver-evil": RejectNotAllowed, "apiserver-meta": RejectNotAllowed, "apiserver-dns": RejectMalformed,
		"apiserver-url": RejectMalformed, "apiserver-zero": RejectMalformed, "apiserver-any": RejectMalformed,
		"apiserver-long": RejectMalformed,
	}
	if len(reasons) != len(wantRej) {
		t.Errorf("rejected = %v, want %v", reasons, wantRej)
	}
	for l, r := range wantRej {
		if reasons[l] != r {
			t.Errorf("%s rejected as %q, want %q", l, reasons[l], r)
		}
	}
	var unaddressed []string
	for _, l := range v.ignored {
		if l.Reason == IgnoredNoAddress {
			unaddressed = append(unaddressed, l.Lease)
		}
	}
	if !slices.Equal(unaddressed, []string{"apiserver-noaddr"}) {
		t.Errorf("unaddressed = %v", unaddressed)
	}
	if want := fresh.Add(30 * time.Second); !v.nextExpiry.Equal(want) {
		t.Errorf("nextExpiry = %v, want %v", v.nextExpiry, want)
	}
	old := v.candidates[3]
	if old.LeaseName != "apiserver-old" || old.Holder != "apiserver-old_0d1f" {
		t.Errorf("static match lost the lease identity: %+v", old)
	}
}

// TestStaleLeaseOfAnsweringApiserver: a Lease that looks stale stays an upstream while the apiserver
// answers our probes (our Lease watch may be what is stale), and goes once it does not.
func TestStaleLeaseOfAnsweringApiserver(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	policy := AddressPolicy{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}
	leases := []*coordinationv1.Lease{
		lease("apiserver-a", "a", "10.0.0.1:6443", now.Add(-40*time.Second)),
		lease("apiserver-b", "b", "10.0.0.2:6443", now.Add(-40*time.Second)),
		lease("apiserver-evil", "evil", "10.1.0.9:6443", now.Add(-40*time.Second)), // answering does not bypass the policy
	}
	v := readLeases(leases, nil, policy, nil, now, 30*time.Second, map[string]bool{"a": true, "evil": true})
	var got []string
	for _, c := range v.candidates {
		got = append(got, c.Name)
	}
	if !slices.Equal(got, []string{"a"}) {
		t.Errorf("candidates %v, want [a]: a answers probes, b does not", got)
	}
	if !v.nextExpiry.IsZero() {
		t.Errorf("nextExpiry %v from a stale Lease", v.nextExpiry)
	}
}
