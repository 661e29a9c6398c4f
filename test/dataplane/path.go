package dataplane

import (
	"net/url"
	"strings"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// Path normalization as the HTTP connection manager does it before any filter or route sees the
// path (ConnectionManagerUtility::maybeNormalizePath, source/common/http/conn_manager_utility.cc):
//
//  1. a fragment ('#') rejects the request (runtime guard http_reject_path_with_fragment, on);
//  2. path_with_escaped_slashes_action: KEEP_UNCHANGED (skewgate's, and the runtime default for
//     IMPLEMENTATION_SPECIFIC_DEFAULT) leaves %2F and %5C alone, UNESCAPE_AND_FORWARD decodes them,
//     REJECT_REQUEST answers 400 when there is one (UNESCAPE_AND_REDIRECT: see below);
//  3. normalize_path: PathUtil::canonicalPath (source/common/http/path_utility.cc) strips the
//     parameters of dot segments ("..;x" is "..", runtime guard
//     strip_dotdot_segments_with_parameters), then runs googleurl's url::CanonicalizePath on the
//     part before '?' (query kept verbatim); a false return answers 400;
//  4. merge_slashes (after normalization: "to catch potential edge cases with percent encoding"):
//     PathUtil::mergeSlashes on the part before '?', a leading and a trailing '/' kept.
//
// The result is written back into :path, so routing, ext_proc and the upstream all see it.

// normalizeRequestPath applies steps 1-4 for the connection manager's config; ok is false when
// Envoy answers 400.
func normalizeRequestPath(p string, hcm *hcmv3.HttpConnectionManager) (string, bool) {
	if strings.IndexByte(p, '#') >= 0 {
		return "", false
	}
	switch hcm.GetPathWithEscapedSlashesAction() {
	case hcmv3.HttpConnectionManager_REJECT_REQUEST:
		if _, found := unescapeSlashes(p); found {
			return "", false
		}
	case hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
		p, _ = unescapeSlashes(p)
	case hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT:
		// Envoy redirects (307) to the unescaped path; the stand-in refuses instead (stricter).
		if _, found := unescapeSlashes(p); found {
			return "", false
		}
	}
	if hcm.GetNormalizePath().GetValue() {
		var ok bool
		if p, ok = canonicalPath(p); !ok {
			return "", false
		}
	}
	if hcm.GetMergeSlashes() {
		p = mergeSlashes(p)
	}
	return p, true
}

// unescapeSlashes is PathUtil::unescapeSlashes: %2F/%2f to '/', %5C/%5c to '\' before the query.
func unescapeSlashes(p string) (string, bool) {
	path, query, hasQ := strings.Cut(p, "?")
	if strings.IndexByte(path, '%') < 0 {
		return p, false
	}
	out := strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", `\`, "%5c", `\`).Replace(path)
	if hasQ {
		out += "?" + query
	}
	return out, len(out) != len(p)
}

// canonicalPath is PathUtil::canonicalPath: dot-segment parameters stripped, then the path before
// the query canonicalized, the query appended unchanged.
func canonicalPath(p string) (string, bool) {
	p = stripDotSegmentParameters(p)
	path, query, hasQ := strings.Cut(p, "?")
	out, ok := canonicalizeURLPath(path)
	if !ok {
		return "", false
	}
	if hasQ {
		out += "?" + query
	}
	return out, true
}

// stripDotSegmentParameters is PathUtil::stripParametersFromDotSegments: a segment starting "..;"
// becomes "..", one starting ".;" becomes ".", in the part before '?' or '#'.
func stripDotSegmentParameters(p string) string {
	end := strings.IndexAny(p, "?#")
	if end < 0 {
		end = len(p)
	}
	path, rest := p[:end], p[end:]
	if !strings.Contains(path, ".;") {
		return p
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, "..;"):
			segs[i] = ".."
		case strings.HasPrefix(s, ".;"):
			segs[i] = "."
		}
	}
	return strings.Join(segs, "/") + rest
}

// mergeSlashes is PathUtil::mergeSlashes: empty segments dropped before the query, a leading and a
// trailing slash kept.
func mergeSlashes(p string) string {
	path, query, hasQ := strings.Cut(p, "?")
	if !strings.Contains(path, "//") {
		return p
	}
	var b strings.Builder
	if strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	first := true
	for _, s := range strings.Split(path, "/") {
		if s == "" {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		b.WriteString(s)
		first = false
	}
	if strings.HasSuffix(path, "/") {
		b.WriteByte('/')
	}
	if hasQ {
		b.WriteString("?" + query)
	}
	return b.String()
}

func unescapeOr(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// Characters as googleurl's kPathCharLookup (url/url_canon_path.cc) classes them.
const (
	pathPass     = iota // copied as it is, and kept escaped when it arrives escaped
	pathUnescape        // unreserved: copied, and decoded when it arrives escaped
	pathEscape          // percent-encoded in the output
	pathInvalid         // NUL: the path is invalid (canonicalization fails)
)

func pathCharClass(c byte) int {
	switch {
	case c == 0:
		return pathInvalid
	case c < ' ' || c >= 0x7f:
		return pathEscape
	case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~':
		return pathUnescape
	case strings.IndexByte(" \"#%<>?\\^`{|}", c) >= 0:
		return pathEscape
	}
	return pathPass
}

// isDot is googleurl's IsDot: the length of a '.' or "%2e"/"%2E" at i, else 0.
func isDot(p string, i int) int {
	if p[i] == '.' {
		return 1
	}
	if p[i] == '%' && i+2 < len(p) && p[i+1] == '2' && (p[i+2] == 'e' || p[i+2] == 'E') {
		return 3
	}
	return 0
}

func isURLSlash(c byte) bool { return c == '/' || c == '\\' }

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// canonicalizeURLPath is googleurl's url::CanonicalizePath (DoPath / DoPartialPath) on 8-bit input,
// as in the googleurl snapshot Envoy pins (dd4080fec0b4, Nov 2022, the last one we could find
// pinned; it predates Chromium's DontDecodeAsciiPercentEncodedURLPath): a '/' is put first if the
// path has none; '\' is '/'; "." and ".." segments (also spelled %2e) are resolved, never above the
// root; %XX of an unreserved character is decoded, other valid escapes are kept as they are (hex
// case kept), an escaped NUL fails the path, a '%' not followed by two hex digits stays a literal
// '%'; characters that must be escaped are written as %XX (upper case). Slashes are not merged.
func canonicalizeURLPath(p string) (string, bool) {
	if p == "" {
		return "/", true
	}
	out := make([]byte, 0, len(p)+1)
	if !isURLSlash(p[0]) {
		out = append(out, '/')
	}
	ok := true
	lastInvalid := -1 // output index of a '%' that began no valid escape
	// backUp is BackUpToPreviousSlash: drop the last segment, keep the root.
	backUp := func() {
		i := len(out) - 1
		if i == 0 {
			return
		}
		for i--; out[i] != '/' && i > 0; i-- {
		}
		out = out[:i+1]
		if lastInvalid >= len(out) {
			lastInvalid = -1
		}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if n := isDot(p, i); n > 0 {
			if len(out) == 0 || out[len(out)-1] != '/' {
				out = append(out, '.') // part of a name
				i += n - 1
				continue
			}
			// ClassifyAfterDot
			after := i + n
			switch {
			case after == len(p):
				i = after - 1 // "." at the end: current directory
			case isURLSlash(p[after]):
				i = after // "./": current directory, slash consumed
			default:
				if m := isDot(p, after); m > 0 && (after+m == len(p) || isURLSlash(p[after+m])) {
					backUp()
					i = after + m // "..", "../": up one, the slash consumed
					if after+m == len(p) {
						i--
					}
				} else {
					out = append(out, '.')
					i += n - 1
				}
			}
			continue
		}
		switch {
		case c == '\\':
			out = append(out, '/')
		case c == '%':
			hi, ok1 := byte(0), false
			lo, ok2 := byte(0), false
			if i+2 < len(p) {
				hi, ok1 = unhex(p[i+1])
				lo, ok2 = unhex(p[i+2])
			}
			if !ok1 || !ok2 {
				lastInvalid = len(out)
				out = append(out, '%') // not an escape: a literal percent sign
				continue
			}
			v := hi<<4 | lo
			switch pathCharClass(v) {
			case pathUnescape:
				out = append(out, v)
				if lastInvalid >= 0 && lastInvalid+3 >= len(out) {
					out = nestedEscapes(p, i+3, lastInvalid, out)
				}
			case pathInvalid:
				out = append(out, p[i:i+3]...)
				ok = false
			default:
				out = append(out, p[i:i+3]...)
			}
			i += 2
		case pathCharClass(c) == pathEscape:
			out = append(out, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		case pathCharClass(c) == pathInvalid:
			out = append(out, "%00"...)
			ok = false
		default:
			out = append(out, c)
		}
	}
	return string(out), ok
}

// nestedEscapes is googleurl's CheckForNestedEscapes: an invalid '%' that an unescaped character
// (and maybe the next input character) would turn into a valid escape is written as "%25", so
// "%%300" does not become "%00".
func nestedEscapes(p string, next, pct int, out []byte) []byte {
	n := len(out)
	last := out[n-1]
	appendNext := pct == n-2
	if appendNext {
		if next == len(p) || p[next] >= 0x80 {
			return out
		}
		out = append(out, p[next])
	}
	_, ok1 := unhex(out[pct+1])
	_, ok2 := unhex(out[pct+2])
	switch {
	case ok1 && ok2:
		if !appendNext {
			out = append(out, out[pct+1])
		}
		out[pct+1], out[pct+2] = '2', '5'
		out = append(out, last)
	case appendNext:
		out = out[:n]
	}
	return out
}
