#!/usr/bin/env bash
# make test's steps, each timed: the testbed binaries, go vet, every package's tests with -race
# (test/evidence last, once every artifact this run writes is written), the bounded fuzz runs.
# With $SKEWGATE_MAKETEST_RESULT naming a file, the run is recorded there as JSON when it ends:
# wall time per step, cores, commit, dirty flag, whether the binaries and Go's build cache were
# there before (cold or warm), and the verdict. Usage: hack/maketest.sh <make> <go> <timeout>
set -euo pipefail
make=$1 go=$2 timeout=$3
: "${SKEWGATE_TEST_BIN:?the skewgate binary the end-to-end tests run (the Makefile sets it)}"
export SKEWGATE_BIN=$SKEWGATE_TEST_BIN
out=${SKEWGATE_MAKETEST_RESULT:-}

cd "$(dirname "$0")/.."
bins=${SKEWGATE_TESTBED_BIN:-.testbed/bin}
binaries=warm
[ -n "$(ls -A "$bins" 2>/dev/null)" ] || binaries=cold
gocache=$("$go" env GOCACHE)
cache=warm
[ -n "$(ls -A "$gocache" 2>/dev/null)" ] || cache=cold

declare -A secs
step() { # step <name> <command...>: runs it, records its seconds, returns its status
	local name=$1 start=$SECONDS rc=0
	shift
	"$@" || rc=$?
	secs[$name]=$((SECONDS - start))
	return $rc
}
record() {
	local rc=$1 evidence=$2
	[ -n "$out" ] || return 0
	# The commit and dirty flag as test/checkout names them for every artifact (one owner of the rule).
	local commit dirty
	read -r commit dirty < <("$go" run -buildvcs=false ./test/checkout/cmd/checkout 2>/dev/null || echo unknown true)
	case $dirty in true | false) ;; *) commit=unknown dirty=true ;; esac
	mkdir -p "$(dirname "$out")"
	cat >"$out" <<JSON
{
  "test": "make test",
  "passed": $([ "$rc" = 0 ] && echo true || echo false),
  "evidence_passed": $evidence,
  "commit": "$commit",
  "dirty": $dirty,
  "finished": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "cpus": $(nproc),
  "cpu": "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1 | sed 's/[[:space:]]*$//')",
  "go": "$("$go" env GOVERSION)",
  "testbed_binaries_before": "$binaries",
  "go_build_cache_before": "$cache",
  "wall_seconds": $((SECONDS - begin)),
  "step_seconds": {"testbed_bins": ${secs[testbed_bins]:-0}, "vet": ${secs[vet]:-0}, "build": ${secs[build]:-0}, "tests": ${secs[tests]:-0}, "evidence": ${secs[evidence]:-0}, "fuzz": ${secs[fuzz]:-0}}
}
JSON
	echo "make test: recorded in $out"
}

begin=$SECONDS
rc=0 evidence=false
# passed is every step but test/evidence: that checks the artifacts this very run may rewrite, and is
# recorded on its own (evidence_passed); make test still fails when it fails.
{
	step testbed_bins "$make" testbed-bins &&
	step vet "$make" vet &&
	step build "$go" build -race -buildvcs=false -o "$SKEWGATE_TEST_BIN" ./cmd/skewgate &&
	step tests "$go" test -race -count=1 -timeout "$timeout" $("$go" list ./... | grep -v '/test/evidence$') &&
	step fuzz "$make" fuzz
} || rc=$?
if [ "$rc" = 0 ]; then
	if step evidence "$go" test -race -count=1 ./test/evidence; then evidence=true; fi
fi
record "$rc" "$evidence"
[ "$rc" = 0 ] && [ "$evidence" = true ]
