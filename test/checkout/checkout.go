// Package checkout names the commit an artifact describes: test/bench, test/e2e and hack/maketest.sh
// (through cmd/checkout) write it into every result they leave under bench/results, and
// test/evidence refuses a figure from an artifact whose commit or whose clean tree no longer holds.
package checkout

import (
	"os/exec"
	"strings"
)

// Current returns HEAD and whether the tracked tree differs from it outside bench/results (the
// artifacts themselves). Without git it returns "unknown" and dirty, so no figure can come from it.
func Current() (commit string, dirty bool) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", true
	}
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)bench/results").Output()
	return strings.TrimSpace(string(out)), err != nil || len(strings.TrimSpace(string(st))) > 0
}
