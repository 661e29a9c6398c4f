package grpcutil

import "testing"

func TestCheckEndpoint(t *testing.T) {
	for _, c := range []struct {
		addr  string
		files []string
		ok    bool
	}{
		{"127.0.0.1:18000", []string{"", "", ""}, true},
		{"localhost:18000", nil, true},
		{"[::1]:18000", nil, true},
		{"unix:///run/skewgate/xds.sock", nil, true},
		{"10.0.0.5:18000", []string{"ca", "crt", "key"}, true},
		{"10.0.0.5:18000", []string{"", "", ""}, false}, // plaintext off the host
		{"10.0.0.5:18000", []string{"ca", "", "key"}, false},
		{"unix://run/x.sock", nil, false},
		{"", nil, false},
		{"no-port", nil, false},
		{"host:99999", []string{"ca", "crt", "key"}, false},
	} {
		errs := CheckEndpoint("test endpoint", c.addr, "the files", c.files...)
		if (len(errs) == 0) != c.ok {
			t.Errorf("%q %v: errors %v, want ok=%v", c.addr, c.files, errs, c.ok)
		}
	}
}
