package discovery

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// ResourceKey names what a request addresses: group/version/resource, plus the subresource where
// there is one. The core group is "".
type ResourceKey struct {
	Group, Version, Resource, Subresource string
}

// String names the resource for people, as error messages do: "resource[/subresource].group (version)",
// "resource (version)" for the core group.
func (k ResourceKey) String() string {
	s := k.Resource
	if k.Subresource != "" {
		s += "/" + k.Subresource
	}
	if k.Group == "" {
		return s + " (" + k.Version + ")"
	}
	return s + "." + k.Group + " (" + k.Version + ")"
}

// Action is what the front does with a request for a resource.
type Action uint8

const (
	// ActionDefault: no routing header; the default route balances over every upstream. Used when
	// every upstream serves the resource, and when none does (an apiserver answers its genuine 404).
	ActionDefault Action = iota
	// ActionRoute: send the request to the upstreams of Decision.Set, exactly the capable ones.
	ActionRoute
	// ActionUnavailable: capable upstreams exist but none is ready: answer 503, never 404.
	ActionUnavailable
	// ActionServe: the front serves a document it merged (OpenAPI only, see DecideOpenAPI).
	ActionServe
)

// MarshalText writes the action's name.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an action's name.
func (a *Action) UnmarshalText(b []byte) error {
	for _, c := range []Action{ActionDefault, ActionRoute, ActionUnavailable, ActionServe} {
		if c.String() == string(b) {
			*a = c
			return nil
		}
	}
	return fmt.Errorf("unknown action %q", b)
}

func (a Action) String() string {
	switch a {
	case ActionRoute:
		return "route"
	case ActionUnavailable:
		return "unavailable"
	case ActionServe:
		return "serve"
	default:
		return "default"
	}
}

// Decision is the routing answer for one resource (and verb).
type Decision struct {
	Action Action
	Set    SetID // set for ActionRoute
}

// SetID names a set of upstreams by its members: their names, sorted and joined by ",". A set of one
// is named by its member. Upstream names are hostnames, so they hold no ",".
type SetID string

// NewSetID names the set of members (in any order).
func NewSetID(members []string) SetID {
	return SetID(strings.Join(slices.Sorted(slices.Values(members)), ","))
}

// Members returns the set's upstream names, sorted.
func (s SetID) Members() []string {
	if s == "" {
		return nil
	}
	return strings.Split(string(s), ",")
}

// route is the decision for a resource key, with overrides for verbs whose capable set differs.
type route struct {
	Decision
	byVerb map[string]Decision // nil for almost every key
}

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

	routes  map[ResourceKey]route
	schemas Decision // DecideSchemas
	openapi openAPIView
}

// Decide returns what to do with a request for key and verb (get, list, watch, create, update,
// patch, delete, deletecollection, ...). Unknown keys get ActionDefault: nobody serves them, so any
// apiserver's 404 is the truth.
func (t *Topology) Decide(key ResourceKey, verb string) Decision {
	r, ok := t.routes[key]
	if !ok {
		return Decision{}
	}
	if r.byVerb != nil {
		if d, ok := r.byVerb[verb]; ok {
			return d
		}
	}
	return r.Decision
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

// Skewed lists the resources (and verbs) that do not take the default route, sorted.
func (t *Topology) Skewed() []SkewedResource {
	var out []SkewedResource
	for k, r := range t.routes {
		if r.Action != ActionDefault {
			out = append(out, SkewedResource{Key: k, Decision: r.Action.String(), Set: r.Set})
		}
		for v, d := range r.byVerb {
			out = append(out, SkewedResource{Key: k, Verb: v, Decision: d.Action.String(), Set: d.Set})
		}
	}
	slices.SortFunc(out, func(a, b SkewedResource) int {
		for _, c := range [][2]string{{a.Key.Group, b.Key.Group}, {a.Key.Version, b.Key.Version}, {a.Key.Resource, b.Key.Resource}, {a.Key.Subresource, b.Key.Subresource}, {a.Verb, b.Verb}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return out
}
