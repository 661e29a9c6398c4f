package evidence

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
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

// at is the number at path.
func at(path string) value {
	return func(doc any) (float64, error) {
		v, err := lookup(doc, path)
		if err != nil {
			return 0, err
		}
		f, ok := v.(float64)
		if !ok {
			return 0, fmt.Errorf("%s is %v, not a number", path, v)
		}
		return f, nil
	}
}

// or0 is the number at path, 0 where the last key is absent (a count of nothing is not written).
func or0(path string) value {
	return func(doc any) (float64, error) {
		dot := strings.LastIndex(path, ".")
		if parent, err := lookup(doc, path[:max(dot, 0)]); err == nil && dot > 0 {
			if m, ok := parent.(map[string]any); ok {
				if _, ok := m[path[dot+1:]]; !ok {
					return 0, nil
				}
			}
		}
		return at(path)(doc)
	}
}

// total is the sum of the numbers of the object at path.
func total(path string) value {
	return func(doc any) (float64, error) {
		v, err := lookup(doc, path)
		if err != nil {
			return 0, err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%s is not an object", path)
		}
		sum := 0.0
		for k, x := range m {
			f, ok := x.(float64)
			if !ok {
				return 0, fmt.Errorf("%s.%s is not a number", path, k)
			}
			sum += f
		}
		return sum, nil
	}
}

// same is one figure README states for several values: they must all be equal.
func same(vs ...value) value {
	return func(doc any) (float64, error) {
		var first float64
		for i, v := range vs {
			f, err := v(doc)
			if err != nil {
				return 0, err
			}
			if i == 0 {
				first = f
			} else if f != first {
				return 0, fmt.Errorf("README states one figure for values that differ: %v and %v", first, f)
			}
		}
		return first, nil
	}
}

// sum adds values.
func sum(vs ...value) value {
	return func(doc any) (float64, error) {
		s := 0.0
		for _, v := range vs {
			f, err := v(doc)
			if err != nil {
				return 0, err
			}
			s += f
		}
		return s, nil
	}
}

// ifNone is v where every one of failures is 0 (README says "all 200" of v), an error otherwise.
func ifNone(v value, failures ...string) value {
	return func(doc any) (float64, error) {
		for _, p := range failures {
			f, err := at(p)(doc)
			if err != nil {
				return 0, err
			}
			if f != 0 {
				return 0, fmt.Errorf("%s is %v: README states there were none", p, f)
			}
		}
		return v(doc)
	}
}

// scaled is v times k (units: ms to s, bytes to MiB).
func scaled(v value, k float64) value {
	return func(doc any) (float64, error) { f, err := v(doc); return f * k, err }
}

// ratio is a / b.
func ratio(a, b value) value {
	return func(doc any) (float64, error) {
		x, err := a(doc)
		if err != nil {
			return 0, err
		}
		y, err := b(doc)
		if err != nil || y == 0 {
			return 0, fmt.Errorf("ratio: denominator %v: %v", y, err)
		}
		return x / y, nil
	}
}

func format(v value, f func(float64) string) arg {
	return func(doc any) (string, error) {
		x, err := v(doc)
		if err != nil {
			return "", err
		}
		return f(x), nil
	}
}

// n renders an integer with README's thousands separator (a space: 15 195).
func n(v value) arg {
	return format(v, func(x float64) string {
		s := strconv.FormatInt(int64(math.Round(x)), 10)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + " " + s[i:]
		}
		return s
	})
}

// d renders an integer without separator (as README's tables write 1052 x 503).
func d(v value) arg {
	return format(v, func(x float64) string { return strconv.FormatInt(int64(math.Round(x)), 10) })
}

// fx renders with k decimals.
func fx(k int, v value) arg {
	return format(v, func(x float64) string { return strconv.FormatFloat(x, 'f', k, 64) })
}

// sig2 renders two significant digits (0.74, 1.1, 24).
func sig2(v value) arg {
	return format(v, func(x float64) string {
		if x == 0 {
			return "0"
		}
		k := max(0, 1-int(math.Floor(math.Log10(math.Abs(x)))))
		return strconv.FormatFloat(x, 'f', k, 64)
	})
}

// pct renders a share as a whole percentage.
func pct(v value) arg {
	return format(v, func(x float64) string { return strconv.FormatFloat(math.Round(x*100), 'f', 0, 64) + "%" })
}

// word renders a count of zero as README's word for it (no, none), any other count as the number,
// so "no 404" stops matching once there is one.
func word(zero string, v value) arg {
	return format(v, func(x float64) string {
		if x == 0 {
			return zero
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	})
}

// word1 renders one string README states for the fields at paths, which must all hold it.
func word1(paths ...string) arg {
	return func(doc any) (string, error) {
		var first string
		for i, p := range paths {
			v, err := lookup(doc, p)
			if err != nil {
				return "", err
			}
			s, ok := v.(string)
			if !ok {
				return "", fmt.Errorf("%s is %v, not a string", p, v)
			}
			if i == 0 {
				first = s
			} else if s != first {
				return "", fmt.Errorf("README states one word for %s and %s, which differ: %q, %q", paths[0], p, first, s)
			}
		}
		return first, nil
	}
}

// minSec renders seconds as README writes a duration of minutes (11 min 11 s).
func minSec(v value) arg {
	return format(v, func(x float64) string {
		s := int64(math.Round(x))
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	})
}

// short renders the artifact's commit as README names it (7 characters).
func short(doc any) (string, error) {
	v, err := lookup(doc, "commit")
	s, ok := v.(string)
	if err != nil || !ok || len(s) < 7 {
		return "", fmt.Errorf("commit %v: %v", v, err)
	}
	return s[:7], nil
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
