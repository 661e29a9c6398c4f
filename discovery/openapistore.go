package discovery

import (
	"maps"
	"slices"
	"strings"
)

// The OpenAPI documents held, content-addressed: no separate store, the upstreams' states are it. A
// document is found by its hash in any state (every upstream of one version publishes the same
// documents under the same hashes) and counted once in the budget however many upstreams hold it; it
// is gone when the last state holding it drops it. All of it runs under the Controller's mutex.

// holdOpenAPIDocLocked gives the upstream name the document d for key, if it still wants it under
// d's hash (the index or the wants may have changed during the fetch).
func (c *Controller) holdOpenAPIDocLocked(name, key string, d *OpenAPISpec) bool {
	s := c.states[name]
	if s == nil || s.openapi == nil || s.openapi.Keys[key] != d.Hash || !slices.Contains(s.openapiWants, key) {
		return false
	}
	if s.openapiDocs[key] == d {
		return false
	}
	docs := maps.Clone(s.openapiDocs)
	if docs == nil {
		docs = map[string]*OpenAPISpec{}
	}
	docs[key] = d
	s.openapiDocs, s.openapiDocsID = docs, openAPIDocsID(docs)
	delete(s.openapiDocErrs, key)
	c.metrics.openapiHeldBytes.Set(float64(c.heldOpenAPIBytesLocked()))
	return true
}

// setOpenAPIDocsLocked keeps the upstream's documents for which keep is true, replacing the map if
// any goes.
func (c *Controller) setOpenAPIDocsLocked(s *upstreamState, keep func(key string, d *OpenAPISpec) bool) {
	var docs map[string]*OpenAPISpec
	for k, d := range s.openapiDocs {
		if keep(k, d) {
			if docs == nil {
				docs = map[string]*OpenAPISpec{}
			}
			docs[k] = d
		}
	}
	if len(docs) == len(s.openapiDocs) {
		return
	}
	s.openapiDocs, s.openapiDocsID = docs, openAPIDocsID(docs)
	c.metrics.openapiHeldBytes.Set(float64(c.heldOpenAPIBytesLocked()))
}

func openAPIDocsID(docs map[string]*OpenAPISpec) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(docs)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(docs[k].Hash)
		b.WriteByte(';')
	}
	return b.String()
}

// heldOpenAPIDocLocked returns the document of key any upstream holds under hash. Shared by key and
// hash, never by hash alone, and only for a hash of handler3's form: a document is held only once
// its bytes hashed to it (openAPIDoc), so another upstream publishing that hash for the key would
// serve these very bytes. Any other hash proves nothing and is never shared.
func (c *Controller) heldOpenAPIDocLocked(key, hash string) *OpenAPISpec {
	if !isSHA512Hex(hash) {
		return nil
	}
	for _, s := range c.states {
		if d := s.openapiDocs[key]; d != nil && d.Hash == hash {
			return d
		}
	}
	return nil
}

// heldOpenAPIBytesLocked sums the bytes of the documents held, each hash once.
func (c *Controller) heldOpenAPIBytesLocked() int64 {
	seen := map[string]bool{}
	var n int64
	for _, s := range c.states {
		for _, d := range s.openapiDocs {
			if !seen[d.Hash] {
				seen[d.Hash] = true
				n += int64(len(d.JSON))
			}
		}
	}
	return n
}
