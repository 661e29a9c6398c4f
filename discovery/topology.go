package discovery

import (
	"slices"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/decision"
)

// The vocabulary of decisions is the decision package's (the table both ext_proc and Envoy's route
// table read); discovery decides, decision.Compile makes the table.
type (
	// ResourceKey names what a request addresses (decision.ResourceKey).
	ResourceKey = decision.ResourceKey
	// Action is what the front does with a request (decision.Action).
	Action = decision.Action
	// Decision is the routing answer for one resource (and verb) (decision.Decision).
	Decision = decision.Decision
	// SetID names a set of upstreams by its members (decision.SetID).
	SetID = decision.SetID
)

// The actions (decision.Action).
const (
	ActionDefault     = decision.ActionDefault
	ActionRoute       = decision.ActionRoute
	ActionUnavailable = decision.ActionUnavailable
	ActionServe       = decision.ActionServe
)

// NewSetID names the set of members (in any order).
func NewSetID(members []string) SetID { return decision.NewSetID(members) }

// Source says where an upstream came from.
type Source string

const (
	SourceLease       Source = "lease"        // identity Lease with an allowed peer-advertise-address
	SourceStatic      Source = "static"       // static configuration only
	SourceLeaseStatic Source = "lease+static" // identity Lease matched to a static entry by hostname
)

// Upstream is one apiserver as the Topology sees it.
type Upstream struct {
	// Name is the apiserver's hostname (identity Lease label) or its static name; it is the key.
	Name    string `json:"name"`
	Address string `json:"address"` // ip:port
	Source  Source `json:"source"`
	// LeaseName and Holder identify the identity Lease, if any.
	LeaseName string `json:"leaseName,omitempty"`
	Holder    string `json:"holder,omitempty"`
	Version   string `json:"version,omitempty"` // gitVersion from /version
	Ready     bool   `json:"ready"`
	// Capabilities is false until discovery was fetched once; Stale is true while the last fetch
	// failed and the last known documents are still used.
	Capabilities bool `json:"capabilities"`
	Stale        bool `json:"stale,omitempty"`
	Resources    int  `json:"resources"` // resource keys it serves
}

// Why a live identity Lease is no upstream (IgnoredLease.Reason and label values of
// skewgate_discovery_ignored_leases), besides the address policy's RejectMalformed and RejectNotAllowed.
const (
	IgnoredNoAddress    = "no_address"         // no peer-advertise-address annotation and no static upstream
	IgnoredContested    = "contested_hostname" // another live Lease claims the same hostname
	IgnoredMaxUpstreams = "max_upstreams"      // over --max-upstreams
)

// IgnoredLease is a live identity Lease that is no upstream, with what to do about it.
type IgnoredLease struct {
	Lease    string `json:"lease"`
	Hostname string `json:"hostname"`
	Reason   string `json:"reason"`
	Hint     string `json:"hint,omitempty"`
}

// CapabilitySet is a group of two or more upstreams that together are exactly the servers of some
// resource. A decision names a set of one by its upstream; Topology.Sets holds the larger ones.
type CapabilitySet struct {
	ID      SetID    `json:"id"`
	Members []string `json:"members"`
}

// MergedDiscovery is a peer-aggregated discovery document and its identity.
type MergedDiscovery struct {
	List apidiscoveryv2.APIGroupDiscoveryList
	// JSON is List serialized; ETag is its SHA-512 in upper-case hex, as the apiserver computes it
	// (k8s.io/apiserver pkg/endpoints/discovery/aggregated/etag.go).
	JSON []byte
	ETag string
}

// Topology is an immutable picture of the upstreams and what they serve. Never modify one: build a
// new one.
type Topology struct {
	// Version never repeats, also across restarts of skewgate.
	Version   string
	Generated time.Time
	// Upstreams sorted by name: the apiservers that proved themselves (discovery fetched over verified
	// TLS and a valid document). Only these are given to Envoy (xds makes clusters of exactly these and
	// Sets).
	Upstreams []Upstream
	// Unproven are upstreams whose discovery was never fetched (just joined, or an address that is no
	// apiserver), sorted by name. They get no Envoy cluster: Envoy opens no connection to them.
	Unproven []Upstream
	// Ignored are live identity Leases that are no upstream, sorted by Lease name.
	Ignored []IgnoredLease
	// Sets used by any decision, sorted by ID (not by the cluster name wire.SetCluster derives).
	Sets []CapabilitySet
	// API is the merged /api (core group) document, APIs the merged /apis document.
	API, APIs MergedDiscovery

	// table is every decision of this Topology, compiled once by Build (Table).
	table   *decision.Table
	openapi openAPIView
}

// Table returns the decision table, compiled once when the Topology was built: ext_proc answers
// requests from it and xds emits Envoy's route table from its rows.
// A Topology not made by Build (a literal in a test) has the empty table: every request default.
func (t *Topology) Table() *decision.Table {
	if t.table == nil {
		return decision.Empty
	}
	return t.table
}

// Decide returns what to do with a request for key and verb (get, list, watch, create, update,
// patch, delete, deletecollection, ...). Unknown keys get ActionDefault: nobody serves them, so any
// apiserver's 404 is the truth.
func (t *Topology) Decide(key ResourceKey, verb string) Decision {
	return t.Table().Resource(key, verb)
}

// Upstream returns the upstream with the given name, proven or not.
func (t *Topology) Upstream(name string) (Upstream, bool) {
	if u, ok := findUpstream(t.Upstreams, name); ok {
		return u, true
	}
	return findUpstream(t.Unproven, name)
}

func findUpstream(us []Upstream, name string) (Upstream, bool) {
	i, ok := slices.BinarySearchFunc(us, name, func(u Upstream, n string) int {
		switch {
		case u.Name < n:
			return -1
		case u.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return Upstream{}, false
	}
	return us[i], true
}

// SkewedResource is a resource not served by every upstream.
type SkewedResource struct {
	Key      ResourceKey `json:"key"`
	Verb     string      `json:"verb,omitempty"` // set when only this verb differs
	Decision string      `json:"decision"`
	Set      SetID       `json:"set,omitempty"`
}

// Skewed lists the resources (and verbs) that do not take the default route, in the table's order
// (by key, then verb).
func (t *Topology) Skewed() []SkewedResource {
	var out []SkewedResource
	for _, r := range t.Table().Rows() {
		if r.Path != decision.PathResource || (r.Verb == "" && r.Action == ActionDefault) {
			continue
		}
		out = append(out, SkewedResource{Key: r.Key, Verb: r.Verb, Decision: r.Action.String(), Set: r.Set})
	}
	return out
}
