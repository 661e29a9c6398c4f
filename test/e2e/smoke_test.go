package e2e

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/test/testbed"
)

// TestFrontServesSkewedAPI: through the front, the API only the new apiserver serves works, and
// discovery lists it; directly on the old apiserver it is a 404.
func TestFrontServesSkewedAPI(t *testing.T) {
	e := setup(t)
	kc := e.f.Kubeconfig(testbed.AdminByToken)
	mustKubectl(t, kc, "get", mapResource)
	out := mustKubectl(t, kc, "api-resources", "--api-group", mapGroup, "-o", "name")
	if !strings.Contains(out, mapResource) {
		t.Errorf("api-resources through the front lacks %s:\n%s", mapResource, out)
	}
	if _, stderr, err := kubectl(e.tb.AdminTokenKubeconfig(), "--context", "old", "get", mapResource); err == nil || !isNotFound(stderr) {
		t.Errorf("old apiserver directly: want a 404, got err=%v %s", err, stderr)
	}
}
