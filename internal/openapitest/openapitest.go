// Package openapitest reads the OpenAPI v3 documents captured from the testbed's apiservers
// (discovery/testdata/openapi, README.md there says how), for the tests of every package that needs
// real documents, and holds what those tests read back from a document (DocView, FindKind,
// SplitDoc) and a protobuf rendering that holds until released (HeldRender). Only tests import it.
package openapitest

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Dir is the folder of one version's captures ("v1.35.4", "v1.36.3").
func Dir(tb testing.TB, version string) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("openapitest: no source path to find the captured documents from")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "discovery", "testdata", "openapi", version)
}

// File reads the capture named name ("index", "api_v1", "apis_apps_v1", ...) of version.
func File(tb testing.TB, version, name string) []byte {
	tb.Helper()
	return Gunzip(tb, filepath.Join(Dir(tb, version), name+".json.gz"))
}

// Doc reads the document of key ("api/v1", "apis/apps/v1", ...) that version served.
func Doc(tb testing.TB, version, key string) []byte {
	tb.Helper()
	return File(tb, version, strings.ReplaceAll(key, "/", "_"))
}

// Gunzip reads a gzipped file.
func Gunzip(tb testing.TB, path string) []byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
