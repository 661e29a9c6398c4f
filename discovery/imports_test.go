package discovery

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKnowsNothingOfEnvoy: discovery describes upstreams and capability sets; naming them for Envoy
// is the contract package's job (internal/wire), translating them is xds's. Neither it nor any
// Envoy API package may be imported here.
func TestKnowsNothingOfEnvoy(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"github.com/skewgate/skewgate/internal/wire", "github.com/skewgate/skewgate/xds",
		"github.com/skewgate/skewgate/extproc", "github.com/envoyproxy/"}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("checked %d files; is the test running in the package directory?", checked)
	}
}
