package e2e

import (
	"testing"

	"github.com/skewgate/skewgate/test/artifact"
)

// writeResults records figures as the scenario's artifact (test/artifact, written when the test ends
// to $SKEWGATE_E2E_RESULTS when set), naming the data plane the front ran on.
func writeResults(t *testing.T, e *env, figures any) {
	t.Helper()
	artifact.Write(t, e.f.DataPlane, figures)
}
