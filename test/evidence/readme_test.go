package evidence

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// artifact is the part of a bench/results/e2e/<Test>.json file (test/e2e/results_test.go) that
// says what it describes.
type artifact struct {
	Test   string `json:"test"`
	Passed bool   `json:"passed"`
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty"`
}

// notCode are the paths whose changes do not change what an end-to-end figure measures: prose, the
// artifacts themselves and this check.
var notCode = []string{":(top,exclude)*.md", ":(top,exclude)bench/results", ":(top,exclude)test/evidence"}

func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the check needs the git checkout: git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// measuredTests are the tests README's "Measured" end-to-end table credits, by artifact name.
func measuredTests(t *testing.T, readme string) []string {
	t.Helper()
	start := strings.Index(readme, "| scenario | result | test |")
	if start < 0 {
		t.Fatal("README.md has no end-to-end table (| scenario | result | test |)")
	}
	table := readme[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	seen := map[string]bool{}
	var tests []string
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9]+)[^`]*`").FindAllStringSubmatch(table, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			tests = append(tests, m[1])
		}
	}
	return tests
}

// TestReadmeFiguresFromPassingRunsAtTheCode: every test the README's end-to-end table credits whose
// figures are in an artifact has one that passed, ran on a clean tree, and whose commit has the same
// code as this checkout (only prose, artifacts and this check may differ). A figure from a failed
// run, or one older than the code it measures, fails make test: re-run with
// SKEWGATE_E2E_RESULTS=$PWD/bench/results/e2e make test and quote the new files.
func TestReadmeFiguresFromPassingRunsAtTheCode(t *testing.T) {
	top := root(t)
	if out, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		t.Skip("a shallow clone has no history to compare the artifacts' commits with: run it in a full clone")
	}
	readme, err := os.ReadFile(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tests := measuredTests(t, string(readme))
	checked := 0
	for _, name := range tests {
		data, err := os.ReadFile(filepath.Join(top, "bench", "results", "e2e", name+".json"))
		if os.IsNotExist(err) {
			continue // a row whose result is an assertion, with no figures of its own
		}
		if err != nil {
			t.Fatal(err)
		}
		var a artifact
		if err := json.Unmarshal(data, &a); err != nil {
			t.Errorf("%s.json: %v", name, err)
			continue
		}
		checked++
		switch {
		case !a.Passed:
			t.Errorf("%s.json is from a run that failed: README must not quote it", name)
		case a.Dirty:
			t.Errorf("%s.json is from a dirty tree at %s: its figures describe no commit", name, a.Commit)
		case a.Commit == "" || a.Commit == "unknown":
			t.Errorf("%s.json names no commit", name)
		default:
			args := append([]string{"diff", "--name-only", a.Commit, "HEAD", "--", ":/"}, notCode...)
			out, err := exec.Command("git", args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s.json: git diff %s: %v: %s", name, a.Commit, err, out)
			} else if changed := strings.Fields(string(out)); len(changed) > 0 {
				t.Errorf("%s.json is from %s, and the code changed since (%d files, e.g. %s): re-run it", name, a.Commit[:min(10, len(a.Commit))], len(changed), changed[0])
			}
		}
	}
	if checked == 0 {
		t.Fatalf("none of the %d tests README's end-to-end table credits has an artifact in bench/results/e2e", len(tests))
	}
	t.Logf("%d artifacts checked of %d tests the table credits", checked, len(tests))
}

// TestMeasuredTestsParsed guards the parser on a table like README's.
func TestMeasuredTestsParsed(t *testing.T) {
	table := "| scenario | result | test |\n| --- | --- | --- |\n| a | 1 | `TestA` |\n| b | 2 | `TestB/sub` |\n| c | 3 | `TestTrust*` |\n| d | 4 | `TestA` |\n\nafter `TestZ`"
	got := strings.Join(measuredTests(t, table), ",")
	if got != "TestA,TestB,TestTrust" {
		t.Errorf("measuredTests = %s, want TestA,TestB,TestTrust", got)
	}
}
