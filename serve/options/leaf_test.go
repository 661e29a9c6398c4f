package options

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the skewgate packages pkg depends on.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var ours []string
	for _, dep := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(dep, "github.com/skewgate/skewgate/"); ok {
			ours = append(ours, rest)
		}
	}
	return ours
}

// TestLeaf: the options import no runtime package (only internal/ leaf helpers), so `skewgate kubeadm
// install` validates serve's flags without linking the control plane: it never depends on serve or
// extproc (it renders Envoy's bootstrap with xds, which is all it takes from the runtime).
func TestLeaf(t *testing.T) {
	for _, dep := range deps(t, ".") {
		if !strings.HasPrefix(dep, "internal/") && dep != "serve/options" {
			t.Errorf("serve/options depends on %s", dep)
		}
	}
	kd := deps(t, "../../kubeadm")
	for _, runtime := range []string{"serve", "extproc"} {
		if slices.Contains(kd, runtime) {
			t.Errorf("kubeadm depends on %s: %v", runtime, kd)
		}
	}
	if !slices.Contains(kd, "serve/options") {
		t.Errorf("kubeadm no longer validates serve's flags with serve/options: %v", kd)
	}
}
