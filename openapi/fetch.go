package openapi

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Getter GETs path (with its query) from one upstream with "Accept: application/json", never
// following a redirect (a 301 for a document means its index moved).
type Getter func(ctx context.Context, path string) (*http.Response, error)

// FetchIndex fetches /openapi/v3. When the body is the one prev was parsed from, it returns prev
// itself (the same pointer: nothing changed). An upstream that answers 404 serves no OpenAPI v3 (the
// feature is off): its index is empty, with an empty Hash. Any invalid index is refused whole.
func FetchIndex(ctx context.Context, get Getter, prev *Index) (*Index, error) {
	resp, err := get(ctx, Prefix)
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
		return &Index{Keys: map[string]string{}}, nil
	default:
		drain(resp)
		return nil, errorf(ErrStatus, "%s: %s", Prefix, resp.Status)
	}
	// No Content-Type check: the aggregator's index is sniffed as text/plain.
	data, err := readLimited(resp, MaxIndexBytes)
	if errors.Is(err, errTooLong) {
		return nil, errorf(ErrTooLarge, "%s: body larger than %d bytes", Prefix, MaxIndexBytes)
	}
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.Hash == IndexHash(data) {
		return prev, nil
	}
	idx, err := ParseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Prefix, err)
	}
	return idx, nil
}

// FetchDocument fetches the document of key under hash (as the upstream's index names it), reading
// at most limit bytes (the smaller of maxBytes, the largest document accepted, and what the memory
// budget has left). A 301 is ErrMoved (never followed); a body over maxBytes ErrTooLarge; over limit
// only, ErrOverBudget. The hash must be of kube-openapi's form (128 upper-case hex), the SHA-512 of
// the body and its ETag: any other hash (an aggregated API server writes its own) proves nothing
// about the bytes, so such a document is never fetched (ErrIntegrity). built is its Built.
func FetchDocument(ctx context.Context, get Getter, key, hash string, limit, maxBytes int64, built time.Time) (*Spec, error) {
	if ValidKey(key) != nil || !ValidHash(hash) {
		return nil, errorf(ErrInvalid, "bad OpenAPI key %.300q or hash %.300q", key, hash)
	}
	if !IsSHA512Hex(hash) {
		return nil, errorf(ErrIntegrity, "%s: hash %.300q is not a SHA-512 in upper-case hex", key, hash)
	}
	path := Prefix + "/" + key + "?hash=" + hash
	resp, err := get(ctx, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMovedPermanently:
		drain(resp)
		return nil, errorf(ErrMoved, "%s: moved to %.600q", path, resp.Header.Get("Location"))
	default:
		drain(resp)
		return nil, errorf(ErrStatus, "%s: %s", path, resp.Status)
	}
	if resp.ContentLength > maxBytes {
		return nil, errorf(ErrTooLarge, "%s: body of %d bytes, larger than %d", path, resp.ContentLength, maxBytes)
	}
	limit = min(limit, maxBytes)
	data, err := readLimited(resp, limit)
	if errors.Is(err, errTooLong) {
		if limit < maxBytes {
			return nil, ErrOverBudget
		}
		return nil, errorf(ErrTooLarge, "%s: body larger than %d bytes", path, maxBytes)
	}
	if err != nil {
		return nil, err
	}
	sum := sha512.Sum512(data)
	if got := strings.ToUpper(hex.EncodeToString(sum[:])); got != hash {
		return nil, errorf(ErrIntegrity, "%s: the body's SHA-512 is %s", path, got)
	}
	if etag := resp.Header.Get("ETag"); etag != `"`+hash+`"` {
		return nil, errorf(ErrIntegrity, "%s: ETag %.300q is not the hash", path, etag)
	}
	if err := CheckDocument(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Spec{JSON: data, Hash: unique.Make(hash).Value(), Built: built}, nil
}

// CheckDocument checks, shallowly, that data is an OpenAPI 3 document: a JSON object with an
// "openapi" string "3.x", a "paths" object and a "components" object.
func CheckDocument(data []byte) error {
	// Only the top-level members are decoded (exact names, not encoding/json's case-insensitive
	// field match); the decoder still checks the whole document's syntax.
	if !isJSONObject(data) {
		return errorf(ErrInvalid, "not a JSON object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return errorf(ErrDecode, "%v", err)
	}
	var version string
	if json.Unmarshal(top["openapi"], &version) != nil || !strings.HasPrefix(version, "3.") {
		return errorf(ErrInvalid, `"openapi" is %.100q, want a string "3.x"`, top["openapi"])
	}
	if !isJSONObject(top["paths"]) || !isJSONObject(top["components"]) {
		return errorf(ErrInvalid, `"paths" and "components" must be objects`)
	}
	return nil
}

// readLimited reads at most limit bytes; more is errTooLong (the body is not read further).
func readLimited(resp *http.Response, limit int64) ([]byte, error) {
	if resp.ContentLength > limit {
		return nil, errTooLong
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errTooLong
	}
	return data, nil
}

var errTooLong = errors.New("body too long")

// drain reads what is left of a body the fetch does not use (at most 64 KiB), so the connection can
// be reused.
func drain(resp *http.Response) { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) }
