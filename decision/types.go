package decision

import (
	"fmt"
	"slices"
	"strings"
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

// Compare orders keys by group, version, resource, subresource.
func (k ResourceKey) Compare(o ResourceKey) int {
	if c := strings.Compare(k.Group, o.Group); c != 0 {
		return c
	}
	if c := strings.Compare(k.Version, o.Version); c != 0 {
		return c
	}
	if c := strings.Compare(k.Resource, o.Resource); c != 0 {
		return c
	}
	return strings.Compare(k.Subresource, o.Subresource)
}

// Action is what the front does with a request.
type Action uint8

const (
	// ActionDefault: the default route balances over every upstream. Used when every upstream
	// serves the resource, and when none does (an apiserver answers its genuine 404).
	ActionDefault Action = iota
	// ActionRoute: send the request to the upstreams of Decision.Set, exactly the capable ones.
	ActionRoute
	// ActionUnavailable: capable upstreams exist but none is ready: answer 503, never 404.
	ActionUnavailable
	// ActionServe: the front serves a document it merged (discovery, OpenAPI), once an apiserver
	// authorized the request; Decision.Set, if any, is where Envoy's route table sends the request
	// while ext_proc is not there.
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

// Decision is the answer for one request shape.
type Decision struct {
	Action Action
	Set    SetID // set for ActionRoute (and the fail-open set of ActionServe)
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
