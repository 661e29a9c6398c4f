package xdstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// CheckGolden holds got to the golden file at path; with update it rewrites the file instead.
// rerun is the command that rewrites it.
func CheckGolden(t testing.TB, path string, got []byte, update bool, rerun string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s)", err, rerun)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs; if the change is intended run %s\n%s", path, rerun, LineDiff(string(want), string(got)))
	}
}

// LineDiff shows every differing line of two texts (-golden +now), with context.
func LineDiff(golden, now string) string {
	return cmp.Diff(strings.Split(golden, "\n"), strings.Split(now, "\n"))
}
