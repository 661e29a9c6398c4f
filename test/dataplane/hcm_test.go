package dataplane

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestXFFAppended: with use_remote_address the peer is appended to the client's X-Forwarded-For
// (for a loopback peer the listener's own address), never replacing it.
func TestXFFAppended(t *testing.T) {
	a := newUpstream(t, "a")
	f := startFront(t, Delta, listener(t, func(h *hcmv3.HttpConnectionManager) { h.UseRemoteAddress = wrapperspb.Bool(true) }),
		routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	f.waitActive("a")
	get(t, f.client(false), f.url("/"), "X-Forwarded-For", "203.0.113.9")
	if got := a.last().Header.Get("X-Forwarded-For"); got != "203.0.113.9,127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want the client's value with the peer appended", got)
	}
	get(t, f.client(false), f.url("/"))
	if got := a.last().Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q without a client value, want the peer", got)
	}
}

// TestHeadersWithUnderscores: REJECT_REQUEST answers 400 and closes the connection on HTTP/1 and
// resets the stream on HTTP/2; nothing reaches the upstream. DROP_HEADER drops the header.
func TestHeadersWithUnderscores(t *testing.T) {
	a := newUpstream(t, "a")
	reject := func(h *hcmv3.HttpConnectionManager) {
		h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{HeadersWithUnderscoresAction: corev3.HttpProtocolOptions_REJECT_REQUEST}
	}
	f := startFront(t, Delta, listener(t, reject), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	f.waitActive("a")

	// HTTP/1.1 on a raw TLS connection, to see the close.
	conn, err := tls.Dial("tcp", f.dp.Addr(), &tls.Config{RootCAs: f.pki.pool, ServerName: "front", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: front\r\nX_Remote_User: admin\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Errorf("HTTP/1: %d close=%v, want 400 and the connection closed", resp.StatusCode, resp.Close)
	}

	req, _ := http.NewRequest(http.MethodGet, f.url("/"), nil)
	req.Header["X_remote_user"] = []string{"admin"}
	_, err = f.client(true).Do(req)
	if err == nil || !strings.Contains(err.Error(), "stream error") {
		t.Errorf("HTTP/2: %v, want a stream reset", err)
	}
	if a.count() != 0 {
		t.Errorf("%d requests with underscore headers reached the upstream", a.count())
	}

	drop := func(h *hcmv3.HttpConnectionManager) {
		h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{HeadersWithUnderscoresAction: corev3.HttpProtocolOptions_DROP_HEADER}
	}
	f2 := startFront(t, Delta, listener(t, drop), routes(routeTo("default", "a")), plainCluster("a", a.addr()))
	f2.waitActive("a")
	if code, _ := get(t, f2.client(false), f2.url("/"), "X_Remote_User", "admin"); code != 200 {
		t.Fatalf("DROP_HEADER: %d", code)
	}
	if v := a.last().Header.Get("X_Remote_User"); v != "" {
		t.Errorf("DROP_HEADER forwarded the header: %q", v)
	}
}

// TestInternalAddressConfig: InternalAddressConfig::isInternalAddress (http_connection_manager/
// config.h): unset, no peer is internal (1.36.0 removed the RFC1918 fallback); set with cidr_ranges,
// only those; set with empty cidr_ranges, Network::Utility::isInternalAddress: RFC1918, exactly
// 127.0.0.1, fd00::/8 and exactly ::1. skewgate's ranges (0.0.0.0/32, ::/128) trust no peer.
func TestInternalAddressConfig(t *testing.T) {
	skewgate := &hcmv3.HttpConnectionManager_InternalAddressConfig{CidrRanges: []*corev3.CidrRange{
		{AddressPrefix: "0.0.0.0", PrefixLen: wrapperspb.UInt32(32)}, {AddressPrefix: "::", PrefixLen: wrapperspb.UInt32(128)}}}
	for _, tc := range []struct {
		name     string
		cfg      *hcmv3.HttpConnectionManager_InternalAddressConfig
		internal []string
		external []string
	}{
		{"unset", nil, nil, []string{"127.0.0.1:1", "10.0.0.1:1", "[::1]:1", "[fd00::1]:1", "/run/sock"}},
		{"empty: Envoy's default ranges", &hcmv3.HttpConnectionManager_InternalAddressConfig{},
			[]string{"127.0.0.1:1", "10.1.2.3:1", "172.16.0.1:1", "172.31.255.255:1", "192.168.1.1:1", "[::1]:1", "[fd12::1]:1", "[::ffff:10.0.0.1]:1"},
			[]string{"127.0.0.2:1", "172.32.0.1:1", "11.0.0.1:1", "203.0.113.1:1", "[fc00::1]:1", "[fe80::1]:1", "[2001:db8::1]:1", "/run/sock"}},
		{"unix_sockets only: IP peers still get the default ranges", &hcmv3.HttpConnectionManager_InternalAddressConfig{UnixSockets: true},
			[]string{"/run/sock", "@abstract", "127.0.0.1:1", "10.0.0.1:1"}, []string{"203.0.113.1:1"}},
		{"cidr_ranges: only those", &hcmv3.HttpConnectionManager_InternalAddressConfig{CidrRanges: []*corev3.CidrRange{
			{AddressPrefix: "100.64.0.0", PrefixLen: wrapperspb.UInt32(10)}}},
			[]string{"100.64.0.1:1", "100.127.255.255:1"}, []string{"127.0.0.1:1", "10.0.0.1:1", "[::1]:1", "/run/sock"}},
		{"skewgate's ranges", skewgate, nil,
			[]string{"127.0.0.1:1", "127.0.0.5:1", "10.0.0.1:1", "192.168.0.1:1", "[::1]:1", "[fd00::1]:1", "[::ffff:127.0.0.1]:1", "/run/sock"}},
	} {
		ia, err := newInternalAddresses(tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, p := range tc.internal {
			if !ia.internal(p) {
				t.Errorf("%s: %s is not internal, Envoy calls it internal", tc.name, p)
			}
		}
		for _, p := range tc.external {
			if ia.internal(p) {
				t.Errorf("%s: %s is internal, Envoy calls it external", tc.name, p)
			}
		}
	}
}

// TestEmptyInternalAddressConfigTrustsLoopback: through the connection manager, an
// internal_address_config without cidr_ranges makes a loopback client internal, so it keeps an
// internal_only_header and routes by it; skewgate's ranges strip it before route selection.
func TestEmptyInternalAddressConfigTrustsLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *hcmv3.HttpConnectionManager_InternalAddressConfig
		want string
	}{
		{"empty cidr_ranges", &hcmv3.HttpConnectionManager_InternalAddressConfig{}, "a"},
		{"skewgate's ranges", &hcmv3.HttpConnectionManager_InternalAddressConfig{CidrRanges: []*corev3.CidrRange{
			{AddressPrefix: "0.0.0.0", PrefixLen: wrapperspb.UInt32(32)}, {AddressPrefix: "::", PrefixLen: wrapperspb.UInt32(128)}}}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newUpstream(t, "a"), newUpstream(t, "b")
			rc := routes(routeByHeader("by-header", "x-route"), routeTo("default", "b"))
			rc.InternalOnlyHeaders = []string{"x-route"}
			f := startFront(t, Delta, listener(t, func(h *hcmv3.HttpConnectionManager) {
				h.UseRemoteAddress, h.InternalAddressConfig = wrapperspb.Bool(true), tc.cfg
			}), rc, plainCluster("a", a.addr()), plainCluster("b", b.addr()))
			f.waitActive("a")
			f.waitActive("b")
			if _, body := get(t, f.client(false), f.url("/"), "x-route", "a"); body != tc.want {
				t.Errorf("a loopback client's x-route routed to %q, want %q", body, tc.want)
			}
		})
	}
}
