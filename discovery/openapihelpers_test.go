package discovery

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/openapitest"
	"github.com/skewgate/skewgate/openapi"
)

// The shared readers of OpenAPI documents (internal/openapitest).
type (
	gvk     = openapitest.GVK
	docView = openapitest.DocView
)

var (
	viewDoc  = openapitest.ViewDoc
	findKind = openapitest.FindKind
)

// schemaRefPrefix starts every reference to a schema of a document.
const schemaRefPrefix = "#/components/schemas/"

// openAPIIndex and openAPIDoc fetch from the fetcher's upstream as the Store does.
func (f *fetcher) openAPIIndex(ctx context.Context, prev *OpenAPIIndex) (*OpenAPIIndex, error) {
	return openapi.FetchIndex(ctx, f.getOpenAPI, prev)
}

func (f *fetcher) openAPIDoc(ctx context.Context, key, hash string, limit int64) (*OpenAPISpec, error) {
	return openapi.FetchDocument(ctx, f.getOpenAPI, key, hash, limit, f.maxBytes, time.Now())
}

// heldDoc returns the document upstream name holds for key.
func heldDoc(c *Controller, name, key string) *OpenAPISpec { return c.openapi.Document(name, key) }

// splitDoc returns a copy of data without the paths containing any of drop and the schemas whose name
// starts with any of dropSchemas, as a document of its own (its own bytes and hash).
func splitDoc(t testing.TB, in *OpenAPISpec, drop, dropSchemas []string, built time.Time) *OpenAPISpec {
	t.Helper()
	data := openapitest.SplitDoc(t, in.JSON, drop, dropSchemas)
	return &OpenAPISpec{JSON: data, Hash: openapi.Hash(data), Built: built}
}

var (
	gvkMAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"}
	gvkVAP = gvk{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}
)

// spec is a document of its own bytes and hash.
func spec(t *testing.T, doc string) *OpenAPISpec {
	t.Helper()
	if !json.Valid([]byte(doc)) {
		t.Fatalf("invalid test document %s", doc)
	}
	return &OpenAPISpec{JSON: []byte(doc), Hash: openapi.Hash([]byte(doc))}
}
