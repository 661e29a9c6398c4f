package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The merge of one key's documents (ActionServe), inputs ordered newest first (the order of
// compareGroups: highest version, then most members, then smallest hash); one document per hash.
// Every input is a document whose bytes hash to the SHA-512 its index names (fetch.go), of a
// key no aggregated APIService serves (decide.go): what an apiserver itself serves under that
// hash. Still, no input may change what belongs to another key or group-version:
//
//   - paths: every path of every input must be the key's own, "/<key>" or under "/<key>/" (as
//     handler3 builds a document from the web service rooted there); a document with any other
//     path is refused and there is no merged document. The union; a path several inputs have takes
//     the newest input's item.
//   - components.schemas: the union; on a name clash the newest input's schema wins. A schema's name
//     is its Go type (io.k8s.api.<group>.<version>.<Kind>, or the CRD's reversed group, version and
//     kind), so a clash is one type at two releases, and API compatibility only adds optional fields
//     within a version: the newer schema accepts what the older one describes.
//   - kinds (the "x-kubernetes-group-version-kind" list of a schema, by which clients such as
//     kubectl explain and apply find a kind's schema, not by name): the newest input's are kept as
//     they are. A losing input's kind (group, version, kind) is kept (on a schema the loser adds) or
//     appended to the winner's list (on a clash) only if all of these hold:
//     (1) its group-version is the key's (a key that names no group-version, such as "version",
//     takes no kind from a losing input); (2) the kind is the schema's own type: the last
//     "."-separated segment of the schema's name (Deployment for io.k8s.api.apps.v1.Deployment,
//     as every schema the apiservers publish names it); (3) no schema of the result claims it
//     already (one kind, one schema). Its other kinds are dropped from the schema it adds and never
//     added to a winner: an older input can describe a kind of this group-version the newest lacks
//     (a resource the new release dropped), nothing else.
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
func Merge(key string, inputs []*Spec, now time.Time) (*Spec, error) {
	if len(inputs) == 0 {
		return nil, errors.New("no documents to merge")
	}
	gv, hasGV := GroupVersion(key)
	group, version, _ := strings.Cut(gv, "/")
	root := "/" + key
	docs := make([]*openAPIDoc, len(inputs))
	built := time.Time{}
	for i, in := range inputs {
		d, err := parseOpenAPIDoc(in.JSON)
		if err != nil {
			return nil, fmt.Errorf("document %s: %w", shortHash(in.Hash), err)
		}
		// In path order: with several foreign paths the error (a degraded key's reason, part of
		// the Topology's fingerprint) names the same one at every rebuild.
		for _, p := range slices.Sorted(maps.Keys(d.paths)) {
			if p != root && !strings.HasPrefix(p, root+"/") {
				return nil, fmt.Errorf("document %s: path %.200q is not under %s: %w", shortHash(in.Hash), p, root, errForeignPath)
			}
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
	paths := maps.Clone(first.paths)
	schemas := maps.Clone(first.schemas)
	kinds := &losingKinds{group: group, version: version, hasGV: hasGV, result: schemas}
	for _, d := range docs[1:] {
		for p, item := range d.paths {
			if _, ok := paths[p]; !ok {
				paths[p] = item
			}
		}
		// In name order: which of two losing schemas claims a kind first must not depend on map order.
		for _, name := range slices.Sorted(maps.Keys(d.schemas)) {
			s := d.schemas[name]
			var kept json.RawMessage
			var err error
			if won, ok := schemas[name]; ok {
				kept, err = kinds.addToWinner(name, won, s)
			} else {
				kept, err = kinds.keepAdded(name, s)
			}
			if err != nil {
				return nil, fmt.Errorf("schema %.200q: %w", name, err)
			}
			schemas[name] = kept
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
	return &Spec{JSON: data, Hash: Hash(data), Built: built}, nil
}

// errForeignPath: an input describes a path of another key.
var errForeignPath = errors.New("a document describes only its own key")

func shortHash(h string) string { return h[:min(len(h), 12)] }

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
