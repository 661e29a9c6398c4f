package openapi

import (
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/openapitest"
)

const (
	v135 = "v1.35.4"
	v136 = "v1.36.3"

	keyAdmission = "apis/admissionregistration.k8s.io/v1"
	keyApps      = "apis/apps/v1"
	keyCore      = "api/v1"
	keyCRD       = "apis/stable.example.com/v1"
)

// captured is what one testbed apiserver served (discovery/testdata/openapi/<version>/).
type captured struct {
	version  string
	indexRaw []byte
	index    *Index
	docs     map[string]*Spec // key -> document
}

var (
	capturedMu    sync.Mutex
	capturedCache = map[string]*captured{}
)

// loadCaptured reads the captured index and documents of version. The documents' Built is a fixed
// time per version. Shared: never change what it returns.
func loadCaptured(t testing.TB, version string) *captured {
	t.Helper()
	capturedMu.Lock()
	defer capturedMu.Unlock()
	if c := capturedCache[version]; c != nil {
		return c
	}
	dir := openapitest.Dir(t, version)
	c := &captured{version: version, indexRaw: openapitest.Gunzip(t, filepath.Join(dir, "index.json.gz")), docs: map[string]*Spec{}}
	idx, err := ParseIndex(c.indexRaw)
	if err != nil {
		t.Fatal(err)
	}
	c.index = &Index{Keys: idx.Keys, Hash: version}
	files, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	built := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if version == v136 {
		built = built.Add(time.Hour)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json.gz")
		if name == "index" {
			continue
		}
		data := openapitest.Gunzip(t, f)
		c.docs[strings.ReplaceAll(name, "_", "/")] = &Spec{JSON: data, Hash: Hash(data), Built: built}
	}
	capturedCache[version] = c
	return c
}

// withoutKeys returns a copy of the index without keys.
func (c *captured) withoutKeys(keys ...string) *Index {
	out := &Index{Keys: maps.Clone(c.index.Keys), Hash: c.index.Hash + "-" + strings.Join(keys, ",")}
	for _, k := range keys {
		delete(out.Keys, k)
	}
	return out
}
