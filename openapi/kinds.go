package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The kinds of a merged document (the rule in merge.go): which x-kubernetes-group-version-kind
// entries of the losing inputs the result keeps.

// gvk is one entry of x-kubernetes-group-version-kind, its fields in the order the apiserver writes
// them (sorted: the extension is a map there).
type gvk struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// losingKinds applies the rule above, (1) to (3), to the kinds of the losing inputs.
type losingKinds struct {
	group, version string
	hasGV          bool                       // the key names a group-version
	result         map[string]json.RawMessage // the merged schemas so far
	claimed        map[gvk]bool               // the kinds of the group-version result claims; nil until needed
}

// admit returns the kinds of ks that schema name may claim, and records them as claimed.
func (l *losingKinds) admit(name string, ks []gvk) ([]gvk, error) {
	if !l.hasGV {
		return nil, nil
	}
	typ := name[strings.LastIndexByte(name, '.')+1:]
	var out []gvk
	for _, k := range ks {
		if k.Group != l.group || k.Version != l.version || k.Kind != typ {
			continue
		}
		if l.claimed == nil {
			if err := l.collect(); err != nil {
				return nil, err
			}
		}
		if !l.claimed[k] {
			l.claimed[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// collect records the kinds of the group-version the schemas of the result claim.
func (l *losingKinds) collect() error {
	l.claimed = map[gvk]bool{}
	// In name order: the first error (a degraded key's reason) is the same at every rebuild.
	for _, name := range slices.Sorted(maps.Keys(l.result)) {
		s := l.result[name]
		if !bytes.Contains(s, []byte(gvkExtension)) {
			continue
		}
		ks, _, err := schemaKinds(s)
		if err != nil {
			return fmt.Errorf("schema %.200q: %w", name, err)
		}
		for _, k := range ks {
			if k.Group == l.group && k.Version == l.version {
				l.claimed[k] = true
			}
		}
	}
	return nil
}

// keepAdded returns a losing input's schema of a name the result lacks, with only the kinds it may
// claim.
func (l *losingKinds) keepAdded(name string, s json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(s, []byte(gvkExtension)) {
		return s, nil
	}
	ks, members, err := schemaKinds(s)
	if err != nil {
		return nil, err
	}
	keep, err := l.admit(name, ks)
	if err != nil {
		return nil, err
	}
	if len(keep) == len(ks) {
		return s, nil
	}
	if len(keep) == 0 {
		delete(members, gvkExtension)
	} else if members[gvkExtension], err = json.Marshal(keep); err != nil {
		return nil, err
	}
	return json.Marshal(members)
}

// addToWinner returns the winning schema of a clash, with the losing schema's kinds it may claim
// appended to its x-kubernetes-group-version-kind.
func (l *losingKinds) addToWinner(name string, winner, loser json.RawMessage) (json.RawMessage, error) {
	if bytes.Equal(winner, loser) || !bytes.Contains(loser, []byte(gvkExtension)) {
		return winner, nil
	}
	loserKinds, _, err := schemaKinds(loser)
	if err != nil {
		return nil, err
	}
	add, err := l.admit(name, loserKinds)
	if err != nil || len(add) == 0 {
		return winner, err
	}
	winnerKinds, members, err := schemaKinds(winner)
	if err != nil {
		return nil, err
	}
	list, err := json.Marshal(append(winnerKinds, add...))
	if err != nil {
		return nil, err
	}
	members[gvkExtension] = list
	return json.Marshal(members)
}

// schemaKinds returns a schema's x-kubernetes-group-version-kind and its members.
func schemaKinds(schema json.RawMessage) ([]gvk, map[string]json.RawMessage, error) {
	members, err := splitObject(schema)
	if err != nil {
		return nil, nil, err
	}
	var kinds []gvk
	if raw, ok := members[gvkExtension]; ok {
		if err := json.Unmarshal(raw, &kinds); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", gvkExtension, err)
		}
	}
	return kinds, members, nil
}
