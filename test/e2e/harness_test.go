package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Resource names of the skewed API: served by v1.36 only.
const (
	mapResource = "mutatingadmissionpolicies"
	mapGroup    = "admissionregistration.k8s.io"
)

type env struct {
	tb *testbed.Testbed
	f  *front.Front
}

// setup starts the default testbed (old = v1.35.4, new = v1.36.3) and a front before it.
func setup(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)
	return &env{tb: tb, f: f}
}

// logDataPlane says, once per test, what served the front: a result obtained on the test data plane
// is evidence about the stand-in, not about Envoy.
func logDataPlane(t *testing.T, f *front.Front) {
	t.Helper()
	if f.DataPlane == "envoy" {
		t.Logf("front %s served by Envoy (ENVOY_BIN is set)", f.URL)
		return
	}
	t.Logf("ENVOY_BIN is unset: front %s ran on the %s (test/dataplane) standing in for Envoy, not on Envoy", f.URL, f.DataPlane)
}

// kubectl runs the real kubectl with a kubeconfig and returns stdout, stderr and the error.
func kubectl(kubeconfig string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "--request-timeout=30s"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func mustKubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, stderr, err := kubectl(kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// isNotFound tells a 404 from kubectl's stderr.
func isNotFound(stderr string) bool {
	return strings.Contains(stderr, "NotFound") || strings.Contains(stderr, "the server could not find the requested resource") ||
		strings.Contains(stderr, "doesn't have a resource type")
}

// mapManifest is a MutatingAdmissionPolicy that changes nothing.
func mapManifest(name string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: ` + name + `
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{}'
`
}

func kubectlApply(kubeconfig, manifest string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "--request-timeout=30s"}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}
