package openapi

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unique"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kube-openapi/pkg/handler3"
	strictjson "sigs.k8s.io/json"
)

// Limits of an index. The testbed's apiservers list 48 keys in 10 KB; a cluster with hundreds of CRD
// group-versions stays far below both.
const (
	MaxIndexBytes = 1 << 20
	MaxKeys       = 4096
	maxKeyLen     = 256
	maxHashLen    = 256
)

// ParseIndex decodes and validates an /openapi/v3 index: kube-openapi's handler3.OpenAPIV3Discovery,
// {"paths": {"<key>": {"serverRelativeURL": "/openapi/v3/<key>?hash=<H>"}}} and nothing else,
// decoded strictly (member names case-sensitive, no unknown or repeated member). Anything that
// could not come from handler3 refuses the whole index with an *Error: a half-understood index must
// not change what the front serves.
func ParseIndex(data []byte) (*Index, error) {
	if len(data) > MaxIndexBytes {
		return nil, errorf(ErrTooLarge, "index larger than %d bytes", MaxIndexBytes)
	}
	if !json.Valid(data) {
		return nil, errorf(ErrDecode, "index: not JSON")
	}
	if !isJSONObject(data) {
		return nil, errorf(ErrDecode, "index: not a JSON object")
	}
	var index handler3.OpenAPIV3Discovery
	strict, err := strictjson.UnmarshalStrict(data, &index, strictjson.DisallowDuplicateFields, strictjson.DisallowUnknownFields)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, errorf(ErrInvalid, "index: not handler3's OpenAPIV3Discovery: %v", err)
	}
	if index.Paths == nil {
		return nil, errorf(ErrInvalid, `index: no "paths" object`)
	}
	if len(index.Paths) > MaxKeys {
		return nil, errorf(ErrInvalid, "index: %d keys, at most %d", len(index.Paths), MaxKeys)
	}
	keys := make(map[string]string, len(index.Paths))
	for key, gv := range index.Paths {
		if err := ValidKey(key); err != nil {
			return nil, errorf(ErrInvalid, "index: key %.300q: %v", key, err)
		}
		prefix := Prefix + "/" + key + "?hash="
		h, ok := strings.CutPrefix(gv.ServerRelativeURL, prefix)
		if !ok || !ValidHash(h) {
			return nil, errorf(ErrInvalid, "index: key %q: serverRelativeURL %.400q is not %s<1 to %d letters or digits>", key, gv.ServerRelativeURL, prefix, maxHashLen)
		}
		// Every upstream of one version lists the same keys and hashes: hold each string once.
		keys[unique.Make(key).Value()] = unique.Make(h).Value()
	}
	return &Index{Keys: keys, Hash: IndexHash(data)}, nil
}

// IndexHash identifies an index body (SHA-256 hex, Index.Hash).
func IndexHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func isJSONObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// ValidKey accepts what kube-openapi's handler3 can list: a web service root path without its
// leading "/" ("api/v1", "apis/apps/v1", "apis/apps", "version", ".well-known/openid-configuration").
// The key becomes part of the URL the front fetches and serves, so it is held to path-safe bytes.
func ValidKey(key string) error {
	if key == "" || len(key) > maxKeyLen {
		return fmt.Errorf("length %d, want 1 to %d", len(key), maxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-') {
			return fmt.Errorf("byte %q not allowed", c)
		}
	}
	if strings.Contains(key, "..") {
		return errors.New(`".." not allowed`)
	}
	segs := strings.Split(key, "/")
	for _, s := range segs {
		if s == "" {
			return errors.New("empty path segment")
		}
		if s == "." {
			// The URL of the key is path.Join'ed (handler3's constructServerRelativeURL), which would
			// name another key's document.
			return errors.New(`"." path segment not allowed`)
		}
	}
	var group, ver string
	switch {
	case len(segs) == 2 && segs[0] == "api":
		ver = segs[1]
	case len(segs) == 3 && segs[0] == "apis":
		group, ver = segs[1], segs[2]
		if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
			return fmt.Errorf("group %q: %s", group, strings.Join(errs, "; "))
		}
	default:
		return nil
	}
	if errs := validation.IsDNS1035Label(ver); len(errs) > 0 {
		return fmt.Errorf("version %q: %s", ver, strings.Join(errs, "; "))
	}
	return nil
}

// ValidHash accepts a hash an index may name: 1 to 256 letters or digits.
func ValidHash(h string) bool {
	if h == "" || len(h) > maxHashLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// IsSHA512Hex reports whether h has the form of kube-openapi's computeETag: 128 upper-case hex digits.
func IsSHA512Hex(h string) bool {
	if len(h) != 2*sha512.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// GroupVersion returns the group-version an index key names: "/<v>" for "api/<v>" (the core group)
// and "<g>/<v>" for "apis/<g>/<v>". Other keys ("version", "apis", "apis/<g>", "logs", ...) name none.
func GroupVersion(key string) (gv string, ok bool) {
	parts := strings.Split(key, "/")
	for _, p := range parts {
		if p == "" {
			return "", false
		}
	}
	switch {
	case len(parts) == 2 && parts[0] == "api":
		return "/" + parts[1], true
	case len(parts) == 3 && parts[0] == "apis":
		return parts[1] + "/" + parts[2], true
	}
	return "", false
}
