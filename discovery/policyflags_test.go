package discovery_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve/options"
)

// The policy's refusal tells the operator which flags allow an address: every flag it names is one
// `skewgate serve` has (it once named --upstream-cidrs, which does not exist).
func TestAddressRefusalNamesServeFlags(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	options.NewOptions().AddFlags(fs)
	err := discovery.CheckAddress(discovery.AddressPolicy{}, "10.9.9.9:6443")
	if err == nil {
		t.Fatal("an address in no CIDR, of no static upstream, was allowed")
	}
	flags := regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(err.Error(), -1)
	if !slices.Contains(flags, "--allowed-cidr") {
		t.Errorf("%q names %v, not --allowed-cidr", err, flags)
	}
	for _, f := range flags {
		if fs.Lookup(strings.TrimPrefix(f, "--")) == nil {
			t.Errorf("%q names %s, which skewgate serve does not have", err, f)
		}
	}
	if !strings.HasPrefix(err.Error(), `address "10.9.9.9:6443": `) {
		t.Errorf("%q does not name the refused address", err)
	}
}

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
