package dataplane

import (
	"net/url"
	"strings"
)

// normalizePath is the HTTP connection manager's normalize_path (RFC 3986 §6: percent-encoded
// unreserved characters decoded, dot segments removed) plus merge_slashes.
func normalizePath(p string, mergeSlashes bool) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			if c, err := url.PathUnescape(p[i : i+3]); err == nil && len(c) == 1 && unreserved(c[0]) {
				b.WriteByte(c[0])
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	p = b.String()
	if mergeSlashes {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
	}
	segs := strings.Split(p, "/")
	var out []string
	for i, s := range segs {
		switch s {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	p = strings.Join(out, "/")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func unescapeOr(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}
