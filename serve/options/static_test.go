package options

import (
	"strings"
	"testing"
)

func TestParseStaticUpstream(t *testing.T) {
	// "" is accepted; anything else is the refusal's cause.
	for in, want := range map[string]string{
		"cp1=10.0.0.1:6443": "", "cp-1.example=cp1.example:443": "", "v6=[fd00::1]:6443": "",
		"[::1]:6443":         "want name=host:port",
		"cp1=10.0.0.1":       "address must be host:port",
		"cp1=:6443":          "address must be host:port",
		"cp1=10.0.0.1:0":     `bad port "0"`,
		"cp1=10.0.0.1:99999": `bad port "99999"`,
		"CP1=10.0.0.1:6443":  "name must be a lowercase DNS label or hostname",
		"=10.0.0.1:6443":     "name must be a lowercase DNS label or hostname",
	} {
		_, err := ParseStaticUpstream(in)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseStaticUpstream(%q) err = %v, want %q", in, err, want)
		}
	}
}
