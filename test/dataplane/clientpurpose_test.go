package dataplane

import (
	"fmt"
	"io"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// TestClientCertificatePurpose (CONFORMANCE row 47): the listener refuses, at the handshake, a
// client certificate BoringSSL's ssl_client purpose refuses, also where Go's own verification
// accepts it (anyExtendedKeyUsage only; a key usage without digitalSignature or keyAgreement; an
// intermediate whose extended key usage lacks clientAuth), and accepts the rest.
func TestClientCertificatePurpose(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	issue := func(cn string, parent *x509.Certificate, ca bool, eku []x509.ExtKeyUsage, ku x509.KeyUsage) *x509.Certificate {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: eku, KeyUsage: ku,
			BasicConstraintsValid: ca, IsCA: ca, DNSNames: []string{cn}}
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	root := issue("root", nil, true, nil, x509.KeyUsageCertSign)
	serverOnlyCA := issue("server-only-ca", root, true, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, x509.KeyUsageCertSign)
	pool := x509.NewCertPool()
	pool.AddCert(root)
	serving := issue("front", root, false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, x509.KeyUsageDigitalSignature)

	for _, c := range []struct {
		name  string
		chain []*x509.Certificate
		want  string // "" accepted, else a substring of the refusal
	}{
		{"clientAuth", []*x509.Certificate{issue("a", root, false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, x509.KeyUsageDigitalSignature)}, ""},
		{"no extensions", []*x509.Certificate{issue("b", root, false, nil, 0)}, ""},
		{"key agreement only", []*x509.Certificate{issue("c", root, false, nil, x509.KeyUsageKeyAgreement)}, ""},
		{"anyExtendedKeyUsage only: Go accepts", []*x509.Certificate{issue("d", root, false, []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, 0)}, "extended key usage without clientAuth"},
		{"key encipherment only: Go accepts", []*x509.Certificate{issue("e", root, false, nil, x509.KeyUsageKeyEncipherment)}, "neither digitalSignature nor keyAgreement"},
		{"serverAuth only: Go refuses too", []*x509.Certificate{issue("f", root, false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, 0)}, "incompatible key usage"},
		{"intermediate without clientAuth", []*x509.Certificate{issue("g", serverOnlyCA, false, nil, 0), serverOnlyCA}, "key usage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var raw [][]byte
			for _, x := range c.chain {
				raw = append(raw, x.Raw)
			}
			srvCfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Raw}, PrivateKey: key}},
				ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, VerifyPeerCertificate: verifySSLClientPurpose}
			cliCfg := &tls.Config{RootCAs: pool, ServerName: "front", Certificates: []tls.Certificate{{Certificate: raw, PrivateKey: key}}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				cs, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				s := tls.Server(cs, srvCfg)
				err = s.Handshake()
				if err == nil {
					// TLS 1.3: the client's certificate is read with its Finished; a read
					// completes the exchange on both sides.
					s.Write([]byte("ok"))
				}
				s.Close()
				done <- err
			}()
			cc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			cl := tls.Client(cc, cliCfg)
			cl.SetDeadline(time.Now().Add(10 * time.Second))
			if cl.Handshake() == nil {
				cl.Read(make([]byte, 2))
			}
			cl.Close()
			err = <-done
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("handshake error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// TestSessionResumption (CONFORMANCE row 47): the listener issues session tickets unless the
// DownstreamTlsContext sets disable_stateless_session_resumption, so a client resumes exactly where
// Envoy lets it (Envoy: SSL_OP_NO_TICKET; a resumed session reports its certificate not validated).
func TestSessionResumption(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprint("disable_stateless_session_resumption=", disable), func(t *testing.T) {
			l := listener(t, nil)
			var dtc tlsv3.DownstreamTlsContext
			if err := l.FilterChains[0].TransportSocket.GetTypedConfig().UnmarshalTo(&dtc); err != nil {
				t.Fatal(err)
			}
			dtc.SessionTicketKeysType = &tlsv3.DownstreamTlsContext_DisableStatelessSessionResumption{DisableStatelessSessionResumption: disable}
			l.FilterChains[0].TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, &dtc)}
			a := newUpstream(t, "a")
			f := startFront(t, Delta, l, routes(routeTo("r", "a")), plainCluster("a", a.addr()))
			f.waitActive("a")
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pki.pool, ServerName: "front", ClientSessionCache: tls.NewLRUClientSessionCache(4)}}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			var resumed []bool
			for range 2 {
				resp, err := c.Get(f.url("/x"))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				resumed = append(resumed, resp.TLS.DidResume)
				tr.CloseIdleConnections()
			}
			if resumed[0] || resumed[1] == disable {
				t.Errorf("resumed %v, want [false %v]", resumed, !disable)
			}
		})
	}
}
