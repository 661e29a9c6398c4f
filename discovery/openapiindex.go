package discovery

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
)

// Limits of an index. The testbed's apiservers list 48 keys in 10 KB; a cluster with hundreds of CRD
// group-versions stays far below both.
const (
	MaxOpenAPIIndexBytes = 1 << 20
	maxOpenAPIKeys       = 4096
	maxOpenAPIKeyLen     = 256
	maxOpenAPIHashLen    = 256
	openAPIPrefix        = "/openapi/v3"
)

// ParseOpenAPIIndex decodes and validates an /openapi/v3 index: {"paths": {"<key>":
// {"serverRelativeURL": "/openapi/v3/<key>?hash=<H>"}}} and nothing else. Anything that could not
// come from kube-openapi's handler3 refuses the whole index: a half-understood index must not change
// what the front serves.
func ParseOpenAPIIndex(data []byte) (*OpenAPIIndex, error) {
	if len(data) > MaxOpenAPIIndexBytes {
		return nil, fetchErr(ErrTooLarge, "index larger than %d bytes", MaxOpenAPIIndexBytes)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fetchErr(ErrDecode, "index: %v", err)
	}
	raw, ok := top["paths"]
	if !ok || len(top) != 1 {
		return nil, fetchErr(ErrInvalid, "index: want an object whose only member is \"paths\", got %d members", len(top))
	}
	var paths map[string]json.RawMessage
	if !isJSONObject(raw) {
		return nil, fetchErr(ErrInvalid, "index: \"paths\" is not an object")
	}
	if err := json.Unmarshal(raw, &paths); err != nil {
		return nil, fetchErr(ErrDecode, "index paths: %v", err)
	}
	if len(paths) > maxOpenAPIKeys {
		return nil, fetchErr(ErrInvalid, "index: %d keys, at most %d", len(paths), maxOpenAPIKeys)
	}
	keys := make(map[string]string, len(paths))
	for key, v := range paths {
		if err := validOpenAPIKey(key); err != nil {
			return nil, fetchErr(ErrInvalid, "index: key %.300q: %v", key, err)
		}
		var entry map[string]json.RawMessage
		if !isJSONObject(v) {
			return nil, fetchErr(ErrInvalid, "index: key %q: not an object", key)
		}
		if err := json.Unmarshal(v, &entry); err != nil {
			return nil, fetchErr(ErrDecode, "index: key %q: %v", key, err)
		}
		rawURL, ok := entry["serverRelativeURL"]
		var u string
		if !ok || len(entry) != 1 || json.Unmarshal(rawURL, &u) != nil {
			return nil, fetchErr(ErrInvalid, "index: key %q: want an object whose only member is the string \"serverRelativeURL\"", key)
		}
		prefix := openAPIPrefix + "/" + key + "?hash="
		h, ok := strings.CutPrefix(u, prefix)
		if !ok || !validOpenAPIHash(h) {
			return nil, fetchErr(ErrInvalid, "index: key %q: serverRelativeURL %.400q is not %s<1 to %d letters or digits>", key, u, prefix, maxOpenAPIHashLen)
		}
		// Every upstream of one version lists the same keys and hashes: hold each string once.
		keys[unique.Make(key).Value()] = unique.Make(h).Value()
	}
	sum := sha256.Sum256(data)
	return &OpenAPIIndex{Keys: keys, Hash: hex.EncodeToString(sum[:])}, nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// validOpenAPIKey accepts what kube-openapi's handler3 can list: a web service root path without its
// leading "/" ("api/v1", "apis/apps/v1", "apis/apps", "version", ".well-known/openid-configuration").
// The key becomes part of the URL the front fetches and serves, so it is held to path-safe bytes.
func validOpenAPIKey(key string) error {
	if key == "" || len(key) > maxOpenAPIKeyLen {
		return fmt.Errorf("length %d, want 1 to %d", len(key), maxOpenAPIKeyLen)
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

func validOpenAPIHash(h string) bool {
	if h == "" || len(h) > maxOpenAPIHashLen {
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

// isSHA512Hex reports whether h has the form of kube-openapi's computeETag: 128 upper-case hex digits.
func isSHA512Hex(h string) bool {
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
