package openapi

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
)

// Prefix is the path of the OpenAPI v3 index; a document is at Prefix + "/" + key.
const Prefix = "/openapi/v3"

// Index is one upstream's /openapi/v3 index: document key -> hash.
type Index struct {
	Keys map[string]string
	// Hash identifies the raw body (SHA-256 hex): equal hashes mean identical indexes.
	Hash string
}

// Spec is one OpenAPI v3 document as the front serves it.
type Spec struct {
	JSON []byte
	// Hash is what kube-openapi's handler3 computes (computeETag): the SHA-512 of JSON in upper-case
	// hex. It is the document's ETag and the ?hash= of its URL in the index.
	Hash string
	// Built is when the document was made: its Last-Modified.
	Built time.Time
}

// DocumentURL is kube-openapi handler3's constructServerRelativeURL: the URL of the document of key
// under hash, as an index names it.
func DocumentURL(key, hash string) string {
	u := url.URL{Path: path.Join(Prefix, key)}
	u.RawQuery = url.Values{"hash": []string{hash}}.Encode()
	return u.String()
}

// Hash is kube-openapi handler3's computeETag: SHA-512 in upper-case hex.
func Hash(data []byte) string { return fmt.Sprintf("%X", sha512.Sum512(data)) }

// indexDocument is an /openapi/v3 index naming each key's document (paths: key -> its DocumentURL),
// made exactly as kube-openapi's handler3 makes its own (OpenAPIService.buildDiscoveryCacheLocked):
// json.Marshal of OpenAPIV3Discovery.
func indexDocument(paths map[string]handler3.OpenAPIV3DiscoveryGroupVersion, now time.Time) *Spec {
	data, err := json.Marshal(handler3.OpenAPIV3Discovery{Paths: paths})
	if err != nil {
		panic(fmt.Sprintf("openapi: marshal the index: %v", err)) // strings only: cannot fail
	}
	return &Spec{JSON: data, Hash: Hash(data), Built: now}
}
