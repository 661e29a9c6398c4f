package openapi

import (
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/internal/openapitest"
)

func TestParseIndexCaptured(t *testing.T) {
	for _, v := range []string{"v1.35.4", "v1.36.3"} {
		idx, err := ParseIndex(openapitest.File(t, v, "index"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if len(idx.Keys) != 48 || len(idx.Hash) != 64 {
			t.Errorf("%s: %d keys, hash %q; the captured index has 48 keys", v, len(idx.Keys), idx.Hash)
		}
		// Every captured document is the one its index names: its SHA-512 is the hash.
		for key, file := range capturedKeys {
			if got, want := idx.Keys[key], sha512Hex(openapitest.File(t, v, file)); got != want {
				t.Errorf("%s: index hash of %s = %.16s…, the captured document's SHA-512 is %.16s…", v, key, got, want)
			}
		}
		for _, key := range []string{".well-known/openid-configuration", "openid/v1/jwks", "apis/apps", "api"} {
			if _, ok := idx.Keys[key]; !ok {
				t.Errorf("%s: key %q missing", v, key)
			}
		}
	}
}

func TestParseIndexRejects(t *testing.T) {
	const h = "ABC123"
	entry := func(key, url string) string {
		return `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=` + h + `"},` +
			`"` + key + `":{"serverRelativeURL":"` + url + `"}}}`
	}
	ok := func(key string) string { return entry(key, "/openapi/v3/"+key+"?hash="+h) }
	var many strings.Builder
	many.WriteString(`{"paths":{`)
	for i := range MaxKeys + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		k := "k" + strings.Repeat("x", i%7) + "/" + hex.EncodeToString([]byte{byte(i >> 8), byte(i)})
		many.WriteString(`"` + k + `":{"serverRelativeURL":"/openapi/v3/` + k + `?hash=1"}`)
	}
	many.WriteString(`}}`)
	cases := []struct {
		name, body, typ string
	}{
		{"not json", "<html>", ErrDecode},
		{"array", `[]`, ErrDecode},
		{"no paths", `{}`, ErrInvalid},
		{"another member", `{"paths":{},"x":1}`, ErrInvalid},
		{"paths not an object", `{"paths":[]}`, ErrInvalid},
		{"paths null", `{"paths":null}`, ErrInvalid},
		{"trailing garbage", ok("apis/apps/v1") + "x", ErrDecode},
		{"entry not an object", `{"paths":{"api/v1":"x"}}`, ErrInvalid},
		{"entry with another member", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=1","x":1}}}`, ErrInvalid},
		{"entry url not a string", `{"paths":{"api/v1":{"serverRelativeURL":1}}}`, ErrInvalid},
		{"leading slash", ok("/apis/apps/v1"), ErrInvalid},
		{"dot dot", ok("apis/../v1"), ErrInvalid},
		{"dot segment", ok("x/./version"), ErrInvalid},
		{"trailing dot segment", ok("version/."), ErrInvalid},
		{"dot dot in a segment", ok("apis/a..b"), ErrInvalid},
		{"empty segment", ok("apis//v1"), ErrInvalid},
		{"trailing slash", ok("apis/apps/v1/"), ErrInvalid},
		{"bad byte", ok("apis/apps/v1?x"), ErrInvalid},
		{"percent", ok("apis/a%2Fb/v1"), ErrInvalid},
		{"space", ok("apis/a b/v1"), ErrInvalid},
		{"key too long", ok(strings.Repeat("a", 257)), ErrInvalid},
		{"group not DNS", ok("apis/Apps/v1"), ErrInvalid},
		{"group underscore", ok("apis/a_b/v1"), ErrInvalid},
		{"version not DNS-1035", ok("apis/apps/1v"), ErrInvalid},
		{"core version not DNS-1035", ok("api/V1"), ErrInvalid},
		{"url of another key", entry("apis/apps/v1", "/openapi/v3/apis/batch/v1?hash="+h), ErrInvalid},
		{"url absolute", entry("apis/apps/v1", "https://evil/openapi/v3/apis/apps/v1?hash="+h), ErrInvalid},
		{"url without hash", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1"), ErrInvalid},
		{"empty hash", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="), ErrInvalid},
		{"hash with other bytes", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash=AB&x=1"), ErrInvalid},
		{"hash too long", entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="+strings.Repeat("A", 257)), ErrInvalid},
		{"too many keys", many.String(), ErrInvalid},
		// Decoded strictly as handler3's type: names are case-sensitive, none repeated or unknown.
		{"paths in another case", `{"Paths":{}}`, ErrInvalid},
		{"url member in another case", `{"paths":{"api/v1":{"serverRelativeUrl":"/openapi/v3/api/v1?hash=1"}}}`, ErrInvalid},
		{"repeated paths", `{"paths":{},"paths":{}}`, ErrInvalid},
		{"repeated key", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=1"},"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=2"}}}`, ErrInvalid},
		{"repeated url", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=1","serverRelativeURL":"/openapi/v3/api/v1?hash=2"}}}`, ErrInvalid},
		{"entry null", `{"paths":{"api/v1":null}}`, ErrInvalid},
		{"top null", `null`, ErrDecode},
		{"too large", `{"paths":{}}` + strings.Repeat(" ", MaxIndexBytes), ErrTooLarge},
	}
	for _, tc := range cases {
		idx, err := ParseIndex([]byte(tc.body))
		if err == nil {
			t.Errorf("%s: accepted (%d keys)", tc.name, len(idx.Keys))
			continue
		}
		var oe *Error
		if !errors.As(err, &oe) {
			t.Errorf("%s: %v is no *Error", tc.name, err)
		} else if got := oe.Type; got != tc.typ {
			t.Errorf("%s: error type %s (%v), want %s", tc.name, got, err, tc.typ)
		}
	}
	// The limits themselves are accepted.
	for _, body := range []string{ok("apis/apps/v1"), ok(strings.Repeat("a", 256)), `{"paths":{}}`,
		entry("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="+strings.Repeat("z", 256)), ok("apis/apps/v1/x"), ok("apis/apps")} {
		if _, err := ParseIndex([]byte(body)); err != nil {
			t.Errorf("%.80s: %v", body, err)
		}
	}
}

// capturedKeys are the documents captured per version, by key.
var capturedKeys = map[string]string{
	"api/v1":                               "api_v1",
	"apis/apps/v1":                         "apis_apps_v1",
	"apis/admissionregistration.k8s.io/v1": "apis_admissionregistration.k8s.io_v1",
	"apis/stable.example.com/v1":           "apis_stable.example.com_v1",
	"version":                              "version",
}

func sha512Hex(b []byte) string {
	sum := sha512.Sum512(b)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}
