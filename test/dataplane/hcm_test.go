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
