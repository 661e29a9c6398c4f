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

// artifact is the part of an artifact (bench/results/e2e/<Test>.json, test/e2e/results_test.go;
// bench/results/results.json, test/bench) that says what it describes.
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

// TestReadmeFiguresFromPassingRunsAtTheCode: every artifact README quotes (each test the README's
// end-to-end table credits that has one, and every artifact of the figures table: make bench's
// results.json included) passed, ran on a clean tree, and its commit has the same code as this
// checkout (only prose, artifacts and this check may differ). A figure from a failed run, or one
// older than the code it measures, fails make test: re-run with
// SKEWGATE_E2E_RESULTS=$PWD/bench/results/e2e make test (or make bench) and quote the new files.
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
	var names []string
	seen := map[string]bool{}
	for _, name := range tests {
		if _, err := os.Stat(filepath.Join(top, "bench", "results", e2e(name))); err == nil {
			names, seen[e2e(name)] = append(names, e2e(name)), true
		} // else a row whose result is an assertion, with no figures of its own
	}
	for _, f := range figures {
		if !seen[f.Artifact] {
			names, seen[f.Artifact] = append(names, f.Artifact), true
		}
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(top, "bench", "results", name))
		if err != nil {
			t.Error(err)
			continue
		}
		var a artifact
		if err := json.Unmarshal(data, &a); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		switch {
		case !a.Passed:
			t.Errorf("%s is from a run that failed (or names no verdict): README must not quote it", name)
		case a.Dirty:
			t.Errorf("%s is from a dirty tree at %s: its figures describe no commit", name, a.Commit)
		case a.Commit == "" || a.Commit == "unknown":
			t.Errorf("%s names no commit", name)
		default:
			args := append([]string{"diff", "--name-only", a.Commit, "HEAD", "--", ":/"}, notCode...)
			out, err := exec.Command("git", args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: git diff %s: %v: %s", name, a.Commit, err, out)
			} else if changed := strings.Fields(string(out)); len(changed) > 0 {
				t.Errorf("%s is from %s, and the code changed since (%d files, e.g. %s): re-run it", name, a.Commit[:min(10, len(a.Commit))], len(changed), changed[0])
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("none of the %d tests README's end-to-end table credits has an artifact in bench/results/e2e", len(tests))
	}
	t.Logf("%d artifacts checked (%d tests the table credits)", len(names), len(tests))
}

// TestMeasuredTestsParsed guards the parser on a table like README's.
func TestMeasuredTestsParsed(t *testing.T) {
	table := "| scenario | result | test |\n| --- | --- | --- |\n| a | 1 | `TestA` |\n| b | 2 | `TestB/sub` |\n| c | 3 | `TestTrust*` |\n| d | 4 | `TestA` |\n\nafter `TestZ`"
	got := strings.Join(measuredTests(t, table), ",")
	if got != "TestA,TestB,TestTrust" {
		t.Errorf("measuredTests = %s, want TestA,TestB,TestTrust", got)
	}
}

// TestReadmeFiguresMatchArtifacts: every README number in the figures table is the one its
// artifact holds, stated in the same sentence; every artifact README's end-to-end table credits
// has figures in the table, and the end-to-end section names the commit of every one of them.
func TestReadmeFiguresMatchArtifacts(t *testing.T) {
	top := root(t)
	readme, err := os.ReadFile(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := oneLine(string(readme))
	dir := filepath.Join(top, "bench", "results")
	all := append([]figure(nil), figures...)
	tied := map[string]bool{}
	for _, f := range figures {
		tied[f.Artifact] = true
	}
	for _, name := range measuredTests(t, string(readme)) {
		a := e2e(name)
		if _, err := os.Stat(filepath.Join(dir, a)); err != nil {
			continue
		}
		if !tied[a] {
			t.Errorf("README's end-to-end table credits %s, whose figures no entry of the figures table ties to README", a)
		}
		all = append(all, figure{a, "(the figures below: commit %s, clean, every test passed)", []arg{short}})
	}
	cache := map[string]any{}
	for _, f := range all {
		want, err := f.render(dir, cache)
		if err != nil {
			t.Errorf("README figure %q: %v", f.Text, err)
			continue
		}
		if !strings.Contains(text, want) {
			t.Errorf("README.md should say, from %s:\n\t%s", f.Artifact, want)
		}
	}
	t.Logf("%d README sentences checked against %d artifacts", len(all), len(cache))
}

// TestFigureHelpers guards the path syntax and the renderings on a document like the artifacts.
func TestFigureHelpers(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(`{"commit":"0123456789","f":{"a b":{"200":15195,"503":2},"zero":0,"share":0.594},
		"latency":[{"Target":"a. x","Rate":5,"P50":1.005},{"Target":"c. y (z.w)","Rate":5,"P50":0.7361}]}`), &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a    arg
		want string
	}{
		{n(at("f.a b.200")), "15 195"}, {d(at("f.a b.200")), "15195"}, {n(total("f.a b")), "15 197"},
		{n(or0("f.a b.404")), "0"}, {pct(at("f.share")), "59%"}, {word("no", at("f.zero")), "no"}, {word("no", at("f.a b.503")), "2"},
		{sig2(at("latency.[Target^=c.;Rate=5].P50")), "0.74"}, {sig2(scaled(at("f.a b.200"), 1e-3)), "15"}, {fx(2, at("latency.[Target^=a.].P50")), "1.00"},
		{fx(2, ratio(at("latency.[Target^=c.].P50"), at("latency.[Target^=a.].P50"))), "0.73"}, {short, "0123456"},
	} {
		if got, err := c.a(doc); err != nil || got != c.want {
			t.Errorf("got %q (%v), want %q", got, err, c.want)
		}
	}
	for _, bad := range []arg{n(at("f.missing")), n(at("latency.[Rate=5]")), n(same(at("f.a b.200"), at("f.a b.503"))), n(ifNone(at("f.zero"), "f.a b.503")), n(at("f.a b"))} {
		if got, err := bad(doc); err == nil {
			t.Errorf("rendered %q, want an error", got)
		}
	}
}

func TestMinSecAndWord(t *testing.T) {
	doc := map[string]any{"w": 671.0, "a": "warm", "b": "warm", "c": "cold"}
	if got, _ := minSec(at("w"))(doc); got != "11 min 11 s" {
		t.Errorf("minSec = %q", got)
	}
	if got, err := word1("a", "b")(doc); got != "warm" || err != nil {
		t.Errorf("word1 = %q, %v", got, err)
	}
	if _, err := word1("a", "c")(doc); err == nil || !strings.Contains(err.Error(), "which differ") {
		t.Errorf("word1 of differing fields: %v", err)
	}
}
