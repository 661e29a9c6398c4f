package discovery

import (
	"context"
	"net/http"

	"github.com/skewgate/skewgate/openapi"
)

// Fetching the OpenAPI v3 index and documents of one upstream: openapi.FetchIndex and
// openapi.FetchDocument over the upstream's client, never following a redirect.

// More fetch error types (metric label values) for OpenAPI.
const (
	// ErrMoved: a document's hash is no longer the one the upstream publishes (301): its index moved.
	ErrMoved = openapi.ErrMoved
	// ErrIntegrity: a document's bytes or ETag do not match the hash its index names, or the hash is
	// not a SHA-512 that could be checked.
	ErrIntegrity = openapi.ErrIntegrity
)

// getOpenAPI is the upstream's openapi.Getter.
func (f *fetcher) getOpenAPI(ctx context.Context, path string) (*http.Response, error) {
	return f.getWith(ctx, f.noRedirect, path, http.Header{"Accept": {"application/json"}})
}
