package e2e

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/test/testbed"
)

// TestScenarioExplain: `kubectl explain` of a resource only the v1.36 apiserver serves, through the
// front, each time with a fresh cache (kubectl keeps a schema it read under a hash for a year): it
// finds the resource every time, because the front sends every schema request (the /openapi/v3
// index and the documents it names) to the most capable apiservers. The control, a plain
// round-robin front over the same apiservers, fails whenever discovery, the index or the document
// came from the v1.35 apiserver.
func TestScenarioExplain(t *testing.T) {
	e := setup(t)
	const rounds = 20
	explain := func(kc string) (bool, string) {
		out, stderr, err := kubectl(kc, "explain", mapResource+".spec", "--cache-dir", t.TempDir())
		ok := err == nil && strings.Contains(out, "MutatingAdmissionPolicy") && strings.Contains(out, "FIELD")
		return ok, strings.TrimSpace(stderr)
	}
	front, control := 0, 0
	var lastFailure string
	for i := range rounds {
		if ok, stderr := explain(e.f.Kubeconfig(testbed.AdminByToken)); !ok {
			front++
			t.Errorf("round %d: kubectl explain %s through the front failed: %s", i, mapResource, stderr)
		}
		if ok, stderr := explain(e.f.RoundRobinKubeconfig(testbed.AdminByToken)); !ok {
			control++
			lastFailure = stderr
		}
	}
	t.Logf("kubectl explain %s.spec, %d rounds, fresh cache each: %d failures through skewgate, %d through round-robin (last: %s)",
		mapResource, rounds, front, control, lastFailure)
	if control == 0 {
		t.Errorf("the round-robin control never failed in %d rounds: the testbed does not show the skew this test is about", rounds)
	}
	writeResults(t, e, map[string]any{
		"rounds": rounds, "front_failures": front, "round_robin_failures": control,
		"note": "kubectl explain mutatingadmissionpolicies.spec with a fresh --cache-dir per call",
	})
}
