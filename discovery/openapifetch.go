package discovery

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unique"
)

// Fetching the OpenAPI v3 index and documents of one upstream.
//
// The index (/openapi/v3) of a kube-apiserver is kube-aggregator's union of its delegates' indexes
// (kube-aggregator pkg/controllers/openapiv3/aggregator/aggregator.go, handleDiscovery): served with
// http.ServeContent and no ETag, so its Content-Type is sniffed (text/plain) and there is no
// conditional request to make; a refetch with the same bytes is recognised by their SHA-256. A
// document is served by kube-openapi's handler3 (pkg/handler3/handler.go, HandleGroupVersion) under
// /openapi/v3/<key>?hash=<H>: H is the SHA-512 of the JSON in upper-case hex and the ETag is "H"; a
// stale H is answered 301 to the current one. What the front merges must be exactly what the
// upstream serves under H, so the hash is checked on the bytes.

// More fetch error types (metric label values) for OpenAPI.
const (
	// ErrMoved: a document's hash is no longer the one the upstream publishes (301): its index moved.
	ErrMoved = "moved"
	// ErrIntegrity: a document's bytes or ETag do not match the hash its index names, or the hash is
	// not a SHA-512 that could be checked.
	ErrIntegrity = "integrity"
)

// errOverBudget: holding the document would exceed Config.MaxOpenAPIBytes.
var errOverBudget = errors.New("the OpenAPI documents held would exceed the memory budget (MaxOpenAPIBytes)")

func (f *fetcher) getOpenAPI(ctx context.Context, path string) (*http.Response, error) {
	return f.getWith(ctx, f.noRedirect, path, http.Header{"Accept": {"application/json"}})
}

// openAPIIndex fetches /openapi/v3. When the body is the one prev was parsed from, it returns prev
// itself (the same pointer: nothing changed). An upstream that answers 404 serves no OpenAPI v3 (the
// feature is off): its index is empty, with an empty Hash. Any invalid index is refused whole.
func (f *fetcher) openAPIIndex(ctx context.Context, prev *OpenAPIIndex) (*OpenAPIIndex, error) {
	resp, err := f.getOpenAPI(ctx, openAPIPrefix)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		drain(resp)
		if prev != nil && prev.Hash == "" {
			return prev, nil
		}
		return &OpenAPIIndex{Keys: map[string]string{}}, nil
	default:
		drain(resp)
		return nil, fetchErr(ErrStatus, "%s: %s", openAPIPrefix, resp.Status)
	}
	// No Content-Type check: the aggregator's index is sniffed as text/plain.
	data, err := readLimited(resp, MaxOpenAPIIndexBytes)
	if errors.Is(err, errTooLong) {
		return nil, fetchErr(ErrTooLarge, "%s: body larger than %d bytes", openAPIPrefix, MaxOpenAPIIndexBytes)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if h := hex.EncodeToString(sum[:]); prev != nil && prev.Hash == h {
		return prev, nil
	}
	idx, err := ParseOpenAPIIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", openAPIPrefix, err)
	}
	return idx, nil
}

// openAPIDoc fetches the document of key under hash (as the upstream's index names it), reading at
// most limit bytes (the smaller of MaxDocumentBytes and what the memory budget has left). A 301
// is ErrMoved (never followed); a body over MaxDocumentBytes ErrTooLarge; over limit only,
// errOverBudget. The hash must be of kube-openapi's form (128 upper-case hex), the SHA-512 of the
// body and its ETag: any other hash (an aggregated API server writes its own) proves nothing about
// the bytes, so such a document is never fetched (ErrIntegrity).
func (f *fetcher) openAPIDoc(ctx context.Context, key, hash string, limit int64) (*OpenAPISpec, error) {
	if validOpenAPIKey(key) != nil || !validOpenAPIHash(hash) {
		return nil, fetchErr(ErrInvalid, "bad OpenAPI key %.300q or hash %.300q", key, hash)
	}
	if !isSHA512Hex(hash) {
		return nil, fetchErr(ErrIntegrity, "%s: hash %.300q is not a SHA-512 in upper-case hex", key, hash)
	}
	path := openAPIPrefix + "/" + key + "?hash=" + hash
	resp, err := f.getOpenAPI(ctx, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMovedPermanently:
		drain(resp)
		return nil, fetchErr(ErrMoved, "%s: moved to %.600q", path, resp.Header.Get("Location"))
	default:
		drain(resp)
		return nil, fetchErr(ErrStatus, "%s: %s", path, resp.Status)
	}
	if resp.ContentLength > f.maxBytes {
		return nil, fetchErr(ErrTooLarge, "%s: body of %d bytes, larger than %d", path, resp.ContentLength, f.maxBytes)
	}
	limit = min(limit, f.maxBytes)
	data, err := readLimited(resp, limit)
	if errors.Is(err, errTooLong) {
		if limit < f.maxBytes {
			return nil, errOverBudget
		}
		return nil, fetchErr(ErrTooLarge, "%s: body larger than %d bytes", path, f.maxBytes)
	}
	if err != nil {
		return nil, err
	}
	sum := sha512.Sum512(data)
	if got := strings.ToUpper(hex.EncodeToString(sum[:])); got != hash {
		return nil, fetchErr(ErrIntegrity, "%s: the body's SHA-512 is %s", path, got)
	}
	if etag := resp.Header.Get("ETag"); etag != `"`+hash+`"` {
		return nil, fetchErr(ErrIntegrity, "%s: ETag %.300q is not the hash", path, etag)
	}
	if err := checkOpenAPIDoc(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &OpenAPISpec{JSON: data, Hash: unique.Make(hash).Value(), Built: time.Now()}, nil
}

// checkOpenAPIDoc checks, shallowly, that data is an OpenAPI 3 document: a JSON object with an
// "openapi" string "3.x", a "paths" object and a "components" object.
func checkOpenAPIDoc(data []byte) error {
	// Only the top-level members are decoded (exact names, not encoding/json's case-insensitive
	// field match); the decoder still checks the whole document's syntax.
	if !isJSONObject(data) {
		return fetchErr(ErrInvalid, "not a JSON object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fetchErr(ErrDecode, "%v", err)
	}
	var version string
	if json.Unmarshal(top["openapi"], &version) != nil || !strings.HasPrefix(version, "3.") {
		return fetchErr(ErrInvalid, `"openapi" is %.100q, want a string "3.x"`, top["openapi"])
	}
	if !isJSONObject(top["paths"]) || !isJSONObject(top["components"]) {
		return fetchErr(ErrInvalid, `"paths" and "components" must be objects`)
	}
	return nil
}
