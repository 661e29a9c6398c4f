package evidence

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

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

// extreme is the smallest (sign -1) or largest (sign 1) of vs.
func extreme(sign float64, vs ...value) value {
	return func(doc any) (float64, error) {
		best := math.NaN()
		for _, v := range vs {
			f, err := v(doc)
			if err != nil {
				return 0, err
			}
			if math.IsNaN(best) || sign*(f-best) > 0 {
				best = f
			}
		}
		return best, nil
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
