package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// floodLimit is the front's connection limit in TestConnectionFloodRefused: small, so that a flood
// reaches it.
const floodLimit = 8

// TestConnectionFloodRefused: with the bootstrap's connection limit at 8, a flood of 60 idle TCP
// connections fills the free slots and every further connection is closed at accept; a client that
// was connected before keeps being served on its connection, a new client is turned away while the
// flood holds, and served again once it is gone.
func TestConnectionFloodRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{Apiservers: testbed.DefaultApiservers()[:1]})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, MaxConnections: floodLimit,
		Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)

	established := httpsClient(t, tb, nil)
	url := f.URL + "/api/v1/namespaces/default"
	if code, body := mustDo(t, established, http.MethodGet, url, testbed.AdminToken); code != http.StatusOK {
		t.Fatalf("established client: %d %.200s", code, body)
	}

	const flood = 60
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	closedAtAccept := 0
	for range flood {
		c, err := net.Dial("tcp", f.Address)
		if err != nil {
			t.Fatalf("flood dial: %v (the listener accepts, then closes)", err)
		}
		conns = append(conns, c)
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) || err != nil && strings.Contains(err.Error(), "connection reset") {
			closedAtAccept++
		}
	}
	// The established client and at most floodLimit-1 flood connections hold the slots (the
	// front's own readiness probe may still hold one more).
	if closedAtAccept < flood-(floodLimit-1) || closedAtAccept == flood {
		t.Errorf("flood of %d beside an established client, limit %d: %d closed at accept, want %d or %d", flood, floodLimit, closedAtAccept, flood-(floodLimit-1), flood-(floodLimit-2))
	}
	for range 10 {
		if code, body := mustDo(t, established, http.MethodGet, url, testbed.AdminToken); code != http.StatusOK {
			t.Fatalf("established client during the flood: %d %.200s", code, body)
		}
	}
	tc, err := tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", f.Address, tc); err == nil {
		c.Close()
		t.Error("a new client completed a TLS handshake while the flood held every slot")
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	fresh := httpsClient(t, tb, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _, err := do(t, fresh, http.MethodGet, url, testbed.AdminToken)
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new client after the flood: %d %v, want 200", code, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("limit %d (%s): %d of %d flood connections closed at accept; the established client served throughout",
		floodLimit, f.DataPlane, closedAtAccept, flood)
}
