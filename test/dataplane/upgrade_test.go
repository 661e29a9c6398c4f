package dataplane

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// rawUpstream is a TCP server that records every byte it receives and answers each request head
// with 403 (keep-alive), as an apiserver refusing an upgrade would.
type rawUpstream struct {
	lis    net.Listener
	mu     sync.Mutex
	got    bytes.Buffer
	accept bool // answer 101 and echo what follows
}

func startRawUpstream(t *testing.T, accept bool) *rawUpstream {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{lis: lis, accept: accept}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					var b bytes.Buffer
					req.Write(&b)
					u.mu.Lock()
					u.got.Write(b.Bytes())
					u.mu.Unlock()
					if u.accept {
						io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
						io.Copy(c, r) // echo the upgraded stream
						return
					}
					io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\nContent-Type: text/plain\r\n\r\nforbidden")
				}
			}()
		}
	}()
	return u
}

func (u *rawUpstream) received() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got.String()
}

// TestUpgradePayloadHeld: bytes pipelined after an Upgrade: SPDY/3.1 request that the upstream
// refuses are upgrade payload: held until a 101 that never comes, never parsed as a second request,
// and the downstream connection closes after the refusal.
func TestUpgradePayloadHeld(t *testing.T) {
	u := startRawUpstream(t, false)
	upg := func(h *hcmv3.HttpConnectionManager) {
		h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}, {UpgradeType: "spdy/3.1"}}
	}
	f := startFront(t, Delta, listener(t, upg), routes(routeTo("default", "a")), plainCluster("a", u.lis.Addr().String()))
	f.waitActive("a")
	conn, err := tls.Dial("tcp", f.dp.Addr(), &tls.Config{RootCAs: f.pki.pool, ServerName: "front", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /api/v1/namespaces/default/pods/p/exec HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"+
		"GET /api/v1/secrets HTTP/1.1\r\nHost: front\r\nX-Remote-User: anyone\r\nX-Remote-Group: system:masters\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("refused upgrade answered %d, want the upstream's 403", resp.StatusCode)
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a second response (%d) came back: the pipelined bytes were served as a request", second.StatusCode)
	} else if err != io.EOF && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("after the refusal: %v, want the connection closed", err)
	}
	time.Sleep(200 * time.Millisecond)
	got := u.received()
	if strings.Count(got, "HTTP/1.1\r\n") != 1 || strings.Contains(got, "/api/v1/secrets") || strings.Contains(got, "system:masters") {
		t.Errorf("the upstream received:\n%s\nwant only the upgrade request", got)
	}
}

// TestUpgradeAccepted: an accepted upgrade answers 101 with the upstream's Connection: Upgrade and
// then carries bytes both ways.
func TestUpgradeAccepted(t *testing.T) {
	u := startRawUpstream(t, true)
	upg := func(h *hcmv3.HttpConnectionManager) {
		h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "spdy/3.1"}}
	}
	f := startFront(t, Delta, listener(t, upg), routes(routeTo("default", "a")), plainCluster("a", u.lis.Addr().String()))
	f.waitActive("a")
	conn, err := tls.Dial("tcp", f.dp.Addr(), &tls.Config{RootCAs: f.pki.pool, ServerName: "front", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /exec HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Connection"), "upgrade") {
		t.Fatalf("%d Connection %q, want 101 with Connection: Upgrade", resp.StatusCode, resp.Header.Values("Connection"))
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo over the upgraded stream: %q %v", buf, err)
	}
}
