package extproc

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/internal/wire"
)

// setHeader is a header mutation entry in the form Envoy's ext_proc filter reads. Its mutation code
// (source/extensions/filters/http/ext_proc/mutation_utils.cc, MutationUtils::applyHeaderMutations)
// reads only the deprecated `append` BoolValue: unset or false replaces every value of the header,
// true adds one more; `append_action` is never read (envoy issue 36982; the pull requests that
// would read it, 37139 and 39066, were closed unmerged). So every entry carries `append`
// explicitly and leaves `append_action` at its zero value.
func setHeader(key, value string, appendValue bool) *corev3.HeaderValueOption {
	a := appendNo
	if appendValue {
		a = appendYes
	}
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}, Append: a}
}

// appendNo and appendYes are shared by every mutation: gRPC only reads them when it marshals.
var appendNo, appendYes = wrapperspb.Bool(false), wrapperspb.Bool(true)

// identity is a verified client certificate's user, as the headers the apiserver's request-header
// authenticator reads (k8s.io/apiserver pkg/authentication/request/headerrequest): the CN is the user
// and each O a group, as the apiserver's own x509 authenticator maps them.
type identity struct {
	user    string
	headers []*corev3.HeaderValueOption
}

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
// goes upstream without one, never with more privilege than proved.
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
	id.headers = append(id.headers, setHeader(wire.RemoteUserHeader, cert.Subject.CommonName, false))
	for i, o := range cert.Subject.Organization {
		// The first group replaces whatever is there (the listener removed client copies anyway);
		// each later one adds a value, so the apiserver sees every group.
		id.headers = append(id.headers, setHeader(wire.RemoteGroupHeader, o, i > 0))
	}
	return id
}
