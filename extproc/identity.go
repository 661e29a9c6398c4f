package extproc

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/skewgate/skewgate/internal/wire"
)

// identity is a verified client certificate's user, as the headers the apiserver's request-header
// authenticator reads (k8s.io/apiserver pkg/authentication/request/headerrequest): the CN is the user
// and each O a group, as the apiserver's own x509 authenticator maps them.
type identity struct {
	user    string
	headers []*corev3.HeaderValueOption
}

// anonymousIdentity is what an apiserver makes of a request without credentials; the front asserts it
// over the front-proxy certificate, which alone (no user header) would fail authentication.
var anonymousIdentity = &identity{user: wire.AnonymousUser, headers: []*corev3.HeaderValueOption{
	{Header: &corev3.HeaderValue{Key: wire.RemoteUserHeader, RawValue: []byte(wire.AnonymousUser)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
	{Header: &corev3.HeaderValue{Key: wire.RemoteGroupHeader, RawValue: []byte(wire.UnauthenticatedGroup)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
}}

// maxIdentities bounds the cache of parsed client certificates.
const maxIdentities = 4096

// identityCache maps Envoy's X-Forwarded-Client-Cert value to the identity it proves. Envoy sets the
// header itself from the certificate it verified against the client CA, and drops any copy a client
// sent (forward_client_cert_details: SANITIZE_SET in the listener), so its presence is proof.
type identityCache struct {
	mu sync.Mutex
	m  map[[32]byte]*identity
}

func (c *identityCache) lookup(xfcc string) *identity {
	if xfcc == "" {
		return nil
	}
	key := sha256.Sum256([]byte(xfcc))
	c.mu.Lock()
	id, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return id
	}
	id = parseXFCC(xfcc)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxIdentities {
		c.m = make(map[[32]byte]*identity)
	}
	c.m[key] = id
	c.mu.Unlock()
	return id
}

// parseXFCC reads the Cert field (URL-encoded PEM) of Envoy's X-Forwarded-Client-Cert. Anything but
// exactly one element with one parsable certificate with a CN gives no identity: the request then
// goes upstream anonymous, never with more privilege than proved.
func parseXFCC(v string) *identity {
	if strings.Count(v, "Cert=") != 1 {
		return nil
	}
	_, rest, _ := strings.Cut(v, "Cert=")
	rest = strings.TrimPrefix(rest, `"`)
	end := strings.IndexAny(rest, `";,`)
	if end >= 0 {
		rest = rest[:end]
	}
	// PathUnescape: base64 has "+", which must not become a space.
	pemText, err := url.PathUnescape(rest)
	if err != nil {
		return nil
	}
	block, _ := pem.Decode([]byte(pemText))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.Subject.CommonName == "" {
		return nil
	}
	id := &identity{user: cert.Subject.CommonName}
	add := func(k, v string, action corev3.HeaderValueOption_HeaderAppendAction) {
		id.headers = append(id.headers, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: action})
	}
	add(wire.RemoteUserHeader, cert.Subject.CommonName, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
	for i, o := range cert.Subject.Organization {
		action := corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		if i == 0 {
			// The first overwrites whatever is there; the listener removed client copies anyway.
			action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		}
		add(wire.RemoteGroupHeader, o, action)
	}
	return id
}
