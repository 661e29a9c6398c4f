// Package identity holds the differential test of the front's certificate identity: skewgate's
// Lua script (xds/identity.lua) run by the test data plane's Lua filter, its headers read by the
// apiserver's request-header authenticator, against the apiserver's own x509 authenticator.
package identity

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/xds"
)

// result is what a client gets: a refusal (handshake, 401, 503) or the identity (nil: none).
type result struct {
	refusal string // "", "handshake", "401", "503/<reason>" (the marker's reason)
	info    user.Info
	err     string // the authenticator's error (direct) or the refusal's message (front)
}

func (r result) String() string {
	if r.refusal != "" {
		return r.refusal + ": " + r.err
	}
	if r.info == nil {
		return "no identity"
	}
	b, _ := json.Marshal(map[string]any{"name": r.info.GetName(), "uid": r.info.GetUID(),
		"groups": r.info.GetGroups(), "extra": r.info.GetExtra()})
	return string(b)
}

type harness struct {
	ca   *testCA
	pool *x509.CertPool
	lua  *dataplane.LuaFilter
	// refusal is the Lua filter after ext_proc, which answers a marked request when ext_proc does not.
	refusal *dataplane.LuaFilter
	logs    []string
}

// newHarness runs identity.lua as the listener emits it with --forward-certificate-uid (forwardUID)
// or without.
func newHarness(t testing.TB, forwardUID bool) *harness {
	h := &harness{ca: newCA(t), pool: x509.NewCertPool()}
	h.pool.AddCert(h.ca.cert)
	lf, err := dataplane.NewLuaFilter(xds.IdentityScriptFor(forwardUID), func(f string, a ...any) { h.logs = append(h.logs, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	h.lua = lf
	if h.refusal, err = dataplane.NewLuaFilter(xds.IdentityRefusalScript, func(f string, a ...any) { h.logs = append(h.logs, fmt.Sprintf(f, a...)) }); err != nil {
		t.Fatal(err)
	}
	return h
}

// direct is the apiserver's x509 authenticator with its default verify options (clientAuth).
func (h *harness) direct(cert *x509.Certificate) result {
	opts := x509request.DefaultVerifyOptions()
	opts.Roots = h.pool
	a := x509request.New(opts, x509request.CommonNameUserConversion)
	r := httptest.NewRequest(http.MethodGet, "https://apiserver/api", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	resp, ok, err := a.AuthenticateRequest(r)
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "verifying certificate"):
		return result{refusal: "handshake", err: err.Error()}
	case err != nil:
		return result{refusal: "401", err: err.Error()}
	case !ok:
		return result{}
	}
	return result{info: resp.User}
}

// front is the handshake (Go's client-certificate verification, as the stand-in's listener; Envoy:
// BoringSSL's ssl_client purpose), the Lua filter, the request on the wire, and the apiserver's
// request-header authenticator.
func (h *harness) front(t testing.TB, cert *x509.Certificate, authorization bool) result {
	t.Helper()
	chains, err := cert.Verify(x509.VerifyOptions{Roots: h.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return result{refusal: "handshake", err: err.Error()}
	}
	r := httptest.NewRequest(http.MethodGet, "https://front/api", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: chains}
	if authorization {
		r.Header.Set("Authorization", "Bearer token")
	}
	rec := httptest.NewRecorder()
	answered := h.lua.OnRequest(rec, r)
	marker := r.Header.Values(wire.IdentityRefusedHeader)
	if !answered && len(marker) > 0 {
		// Refused: the marker and no identity header; ext_proc answers it, or, when it does not, the
		// refusal filter after it, whose answer is checked here.
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-remote-") {
				t.Fatalf("refused (%v) but %s is set", marker, k)
			}
		}
		if len(marker) != 1 {
			t.Fatalf("refusal marker %q: want one value", marker)
		}
		rec = httptest.NewRecorder()
		if !h.refusal.OnRequest(rec, r) || rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("the refusal filter did not answer the marked request 503: %v %d", answered, rec.Code)
		}
	}
	if answered || len(marker) > 0 {
		var st struct {
			Kind, Message, Reason string
			Code                  int
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || st.Code != rec.Code {
			t.Fatalf("refusal %d is not a metav1.Status: %q", rec.Code, rec.Body.String())
		}
		if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("503 without Retry-After: %v", rec.Header())
		}
		if got := rec.Header().Get("Content-Type"); got != "application/json" {
			t.Fatalf("refusal content-type %q", got)
		}
		if len(marker) > 0 {
			return result{refusal: "503/" + marker[0], err: st.Message}
		}
		return result{refusal: strconv.Itoa(rec.Code), err: st.Message}
	}
	if got := r.Header.Get("Authorization"); authorization && got != "Bearer token" {
		t.Fatalf("Authorization changed to %q", got)
	}
	// On the wire to the apiserver and read back as its server reads it.
	out, _ := http.NewRequest(http.MethodGet, "https://apiserver/api", nil)
	out.Header = r.Header.Clone()
	var buf bytes.Buffer
	if err := out.Write(&buf); err != nil {
		t.Fatalf("the request cannot be sent: %v", err)
	}
	in, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("the apiserver cannot read the request: %v", err)
	}
	a, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, []string{"X-Remote-Extra-"})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := a.AuthenticateRequest(in)
	if err != nil {
		t.Fatalf("request-header authenticator: %v", err)
	}
	if !ok {
		return result{}
	}
	return result{info: resp.User}
}

func sameInfo(a, b user.Info) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	norm := func(g []string) []string {
		if g == nil {
			return []string{}
		}
		return g
	}
	if a.GetName() != b.GetName() || a.GetUID() != b.GetUID() || !slices.Equal(norm(a.GetGroups()), norm(b.GetGroups())) {
		return false
	}
	ea, eb := a.GetExtra(), b.GetExtra()
	if len(ea) != len(eb) {
		return false
	}
	for k, v := range ea {
		if !slices.Equal(v, eb[k]) {
			return false
		}
	}
	return true
}
