package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The merge of one key's documents (ActionServe), inputs ordered newest first (the order of
// compareGroups: highest version, then most members, then smallest hash); one document per hash.
//
//   - paths: the union; a path several inputs have takes the newest input's item.
//   - components.schemas: the union; on a name clash the newest input's schema wins. A schema's name
//     is its Go type (io.k8s.api.<group>.<version>.<Kind>, or the CRD's reversed group, version and
//     kind), so a clash is one type at two releases, and API compatibility only adds optional fields
//     within a version: the newer schema accepts what the older one describes. One refinement: if
//     the losing schema's "x-kubernetes-group-version-kind" lists a group-version-kind of this
//     key's group-version that the winner's lacks, it is appended to the winner's list, because
//     clients (kubectl explain, apply) find a kind's schema by that extension, not by name.
//     Unlike apiextensions' MergeSpecsV3 (an error on a clash) and the v2 aggregator (renaming the
//     loser to <name>_v2), a clash never fails the merge, and one type at two releases never becomes
//     two schemas claiming one kind.
//   - every other member (openapi, info, components.securitySchemes, ...): the newest input's.
//   - every "#/components/schemas/<name>" reference in the result must name a schema of the result;
//     if one does not, the inputs are inconsistent and there is no merged document (the key routes
//     to its fallback), never a broken document under a hash.
//
// The output is deterministic: object keys sorted at the top, in paths and in components (the
// members' own bytes are the inputs', compacted), no HTML escaping, no trailing newline. Its hash is
// handler3's: the SHA-512 of exactly those bytes. Built is the latest Built of the inputs (stable
// while the inputs are), else now.

// gvkExtension is the vendor extension that names the kinds a schema describes.
const gvkExtension = "x-kubernetes-group-version-kind"

// schemaRefPrefix starts every reference to a schema of the document.
const schemaRefPrefix = "#/components/schemas/"

// openAPIDoc is a shallow parse of an OpenAPI v3 document: only the members the merge touches are
// split; everything else stays raw bytes (slices of the input, never copied).
type openAPIDoc struct {
	top        map[string]json.RawMessage
	paths      map[string]json.RawMessage
	components map[string]json.RawMessage
	schemas    map[string]json.RawMessage
}

func parseOpenAPIDoc(data []byte) (*openAPIDoc, error) {
	d := &openAPIDoc{}
	var err error
	if d.top, err = splitObject(data); err != nil {
		return nil, err
	}
	if d.paths, err = splitMember(d.top["paths"]); err != nil {
		return nil, fmt.Errorf("paths: %w", err)
	}
	if d.components, err = splitMember(d.top["components"]); err != nil {
		return nil, fmt.Errorf("components: %w", err)
	}
	if d.schemas, err = splitMember(d.components["schemas"]); err != nil {
		return nil, fmt.Errorf("components.schemas: %w", err)
	}
	return d, nil
}

// splitMember splits a member that must be an object; absent (nil) is an empty object.
func splitMember(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if raw == nil {
		return map[string]json.RawMessage{}, nil
	}
	return splitObject(raw)
}

// mergeOpenAPI merges the documents of key, inputs newest first, by the rule above.
func mergeOpenAPI(key string, inputs []*OpenAPISpec, now time.Time) (*OpenAPISpec, error) {
	if len(inputs) == 0 {
		return nil, errors.New("no documents to merge")
	}
	gv, _ := openAPIGroupVersion(key)
	group, version, _ := strings.Cut(gv, "/")
	docs := make([]*openAPIDoc, len(inputs))
	built := time.Time{}
	for i, in := range inputs {
		d, err := parseOpenAPIDoc(in.JSON)
		if err != nil {
			return nil, fmt.Errorf("document %s: %w", shortHash(in.Hash), err)
		}
		docs[i] = d
		if in.Built.After(built) {
			built = in.Built
		}
	}
	if built.IsZero() {
		built = now
	}
	first := docs[0]
	paths := make(map[string]json.RawMessage, len(first.paths))
	schemas := make(map[string]json.RawMessage, len(first.schemas))
	for _, d := range docs {
		for p, item := range d.paths {
			if _, ok := paths[p]; !ok {
				paths[p] = item
			}
		}
		for name, s := range d.schemas {
			won, ok := schemas[name]
			if !ok {
				schemas[name] = s
				continue
			}
			merged, err := addLosingKinds(won, s, group, version)
			if err != nil {
				return nil, fmt.Errorf("schema %s: %w", name, err)
			}
			schemas[name] = merged
		}
	}
	components := make(map[string]any, len(first.components))
	for k, v := range first.components {
		components[k] = v
	}
	components["schemas"] = schemas
	top := make(map[string]any, len(first.top))
	for k, v := range first.top {
		top[k] = v
	}
	top["paths"] = paths
	top["components"] = components

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if cap(data) > len(data)+len(data)/4 {
		data = bytes.Clone(data) // the Topology and the memo keep it: not the buffer's spare room
	}
	if name, ok := danglingSchemaRef(data, schemas); ok {
		return nil, fmt.Errorf("dangling reference to schema %q", name)
	}
	return &OpenAPISpec{JSON: data, Hash: openAPIHash(data), Built: built}, nil
}

func shortHash(h string) string { return h[:min(len(h), 12)] }

// gvk is one entry of x-kubernetes-group-version-kind, its fields in the order the apiserver writes
// them (sorted: the extension is a map there).
type gvk struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// addLosingKinds returns the winning schema, with the losing schema's group-version-kinds of group and
// version appended to its x-kubernetes-group-version-kind when it lacks them.
func addLosingKinds(winner, loser json.RawMessage, group, version string) (json.RawMessage, error) {
	if bytes.Equal(winner, loser) || !bytes.Contains(loser, []byte(gvkExtension)) {
		return winner, nil
	}
	loserGVKs, _, err := schemaKinds(loser)
	if err != nil {
		return nil, err
	}
	var candidates []gvk
	for _, k := range loserGVKs {
		if k.Group == group && k.Version == version {
			candidates = append(candidates, k)
		}
	}
	if len(candidates) == 0 {
		return winner, nil
	}
	winnerGVKs, members, err := schemaKinds(winner)
	if err != nil {
		return nil, err
	}
	added := false
	for _, k := range candidates {
		if !slices.Contains(winnerGVKs, k) {
			winnerGVKs = append(winnerGVKs, k)
			added = true
		}
	}
	if !added {
		return winner, nil
	}
	list, err := json.Marshal(winnerGVKs)
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

// danglingSchemaRef returns the first "#/components/schemas/<name>" string in data (a compact JSON
// document) whose name is not in schemas.
func danglingSchemaRef(data []byte, schemas map[string]json.RawMessage) (string, bool) {
	needle := []byte(`"` + schemaRefPrefix)
	for rest := data; ; {
		i := bytes.Index(rest, needle)
		if i < 0 {
			return "", false
		}
		start := i
		// A string that starts with the prefix, not an escaped quote inside another string.
		if start > 0 && rest[start-1] == '\\' {
			rest = rest[start+len(needle):]
			continue
		}
		end := start + 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(rest) {
			return "", false // cannot happen in valid JSON
		}
		ref, err := decodeKey(rest[start : end+1])
		if err != nil {
			return string(rest[start : end+1]), true
		}
		name := strings.TrimPrefix(ref, schemaRefPrefix)
		// A JSON pointer token: ~1 is "/", ~0 is "~".
		name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
		if _, ok := schemas[name]; !ok {
			return name, true
		}
		rest = rest[end+1:]
	}
}
