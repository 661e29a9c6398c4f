package evidence

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A figure ties a sentence of README.md to the artifact it comes from: README must contain Text
// (whitespace runs count as one space) with each %s replaced by an argument read from the artifact
// (a file under bench/results). Change a README figure, or re-run what measures it, and the
// sentence no longer matches until both agree.
type figure struct {
	Artifact string
	Text     string
	Args     []arg
}

// arg renders one figure from an artifact's decoded JSON.
type arg func(doc any) (string, error)

// value reads a number from an artifact's decoded JSON.
type value func(doc any) (float64, error)

// lookup walks path through doc: keys separated by dots; a segment [k=v;k2^=p] picks the one
// element of a list whose field k equals v and whose field k2 starts with p.
func lookup(doc any, path string) (any, error) {
	cur := doc
	for _, seg := range splitPath(path) {
		if sel, ok := strings.CutPrefix(seg, "["); ok {
			list, ok := cur.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: %s is not applied to a list", path, seg)
			}
			var found []any
			for _, el := range list {
				if matches(el, strings.TrimSuffix(sel, "]")) {
					found = append(found, el)
				}
			}
			if len(found) != 1 {
				return nil, fmt.Errorf("%s: %s picks %d elements, want one", path, seg, len(found))
			}
			cur = found[0]
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not applied to an object", path, seg)
		}
		if cur, ok = m[seg]; !ok {
			return nil, fmt.Errorf("%s: no field %q", path, seg)
		}
	}
	return cur, nil
}

// splitPath splits at dots outside brackets.
func splitPath(path string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range path {
		switch {
		case c == '[':
			if depth == 0 && i > start {
				out = append(out, path[start:i])
				start = i
			}
			depth++
		case c == ']':
			depth--
		case c == '.' && depth == 0:
			if i > start {
				out = append(out, path[start:i])
			}
			start = i + 1
		}
	}
	if start < len(path) {
		out = append(out, path[start:])
	}
	return out
}

func matches(el any, sel string) bool {
	m, ok := el.(map[string]any)
	if !ok {
		return false
	}
	for _, cond := range strings.Split(sel, ";") {
		prefix := false
		k, v, ok := strings.Cut(cond, "^=")
		if ok {
			prefix = true
		} else if k, v, ok = strings.Cut(cond, "="); !ok {
			return false
		}
		got := fmt.Sprint(m[k])
		if prefix && !strings.HasPrefix(got, v) || !prefix && got != v {
			return false
		}
	}
	return true
}

// render reads the figure's artifact and returns the sentence README must contain.
func (f figure) render(resultsDir string, cache map[string]any) (string, error) {
	doc, ok := cache[f.Artifact]
	if !ok {
		data, err := os.ReadFile(filepath.Join(resultsDir, f.Artifact))
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return "", fmt.Errorf("%s: %v", f.Artifact, err)
		}
		cache[f.Artifact] = doc
	}
	args := make([]any, len(f.Args))
	for i, a := range f.Args {
		s, err := a(doc)
		if err != nil {
			return "", fmt.Errorf("%s: %v", f.Artifact, err)
		}
		args[i] = s
	}
	return oneLine(fmt.Sprintf(f.Text, args...)), nil
}

// oneLine collapses whitespace runs, so a README sentence may wrap anywhere.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
