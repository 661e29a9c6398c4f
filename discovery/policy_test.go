package discovery_test

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

// TestNoDefaultAddressRange: with no --allowed-cidr and no vouching static upstream or EndpointSlice
// entry, no Lease address is accepted: no private range, not loopback either (unlike Envoy's
// internal_address_config, whose empty cidr_ranges falls back to RFC1918, fd00::/8 and loopback).
func TestNoDefaultAddressRange(t *testing.T) {
	for _, a := range []string{"127.0.0.1:6443", "[::1]:6443", "10.0.0.1:6443", "172.16.0.1:6443", "192.168.0.1:6443", "[fd00::1]:6443"} {
		if err := discovery.CheckAddress(discovery.AddressPolicy{}, a); err == nil || !strings.Contains(err.Error(), "is not in an --allowed-cidr") {
			t.Errorf("%s with no policy: error %v, want it not allowed", a, err)
		}
	}
}
