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
// install` validates serve's flags without linking the control plane; it renders Envoy's bootstrap
// with xds/envoyconf, itself a leaf, so it links no runtime package at all.
func TestLeaf(t *testing.T) {
	for _, pkg := range []string{".", "../../xds/envoyconf"} {
		for _, dep := range deps(t, pkg) {
			if !strings.HasPrefix(dep, "internal/") && dep != "serve/options" && dep != "xds/envoyconf" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
	kd := deps(t, "../../kubeadm")
	for _, runtime := range []string{"serve", "extproc", "xds", "discovery", "decision", "openapi"} {
		if slices.Contains(kd, runtime) {
			t.Errorf("kubeadm depends on %s: %v", runtime, kd)
		}
	}
	for _, leaf := range []string{"serve/options", "xds/envoyconf"} {
		if !slices.Contains(kd, leaf) {
			t.Errorf("kubeadm no longer uses %s: %v", leaf, kd)
		}
	}
}
