package xdstest

import (
	"path/filepath"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

var cases = filepath.Join("..", "..", "xds", "testdata")

// count counts the groups' versions of d that serve resource.
func count(d *discovery.Document, resource string) int {
	n := 0
	for _, g := range d.Groups {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				if r.Resource == resource {
					n++
				}
			}
		}
	}
	return n
}

// TestWithoutResource: the copy lacks the resource and the original, which other fixtures share,
// keeps it.
func TestWithoutResource(t *testing.T) {
	d := Doc(t, cases, "apis-v1.36")
	before := count(d, "validatingadmissionpolicies")
	if before == 0 {
		t.Fatal("apis-v1.36 serves no validatingadmissionpolicies: the case this test is about is gone")
	}
	out := WithoutResource(d, "validatingadmissionpolicies")
	if n := count(out, "validatingadmissionpolicies"); n != 0 {
		t.Errorf("the copy still serves it in %d group-versions", n)
	}
	if n := count(d, "validatingadmissionpolicies"); n != before {
		t.Errorf("the original serves it in %d group-versions, want %d as before", n, before)
	}
	if out.Hash == d.Hash {
		t.Errorf("the copy has the original's hash %s, so a merge would take it for the original", d.Hash)
	}
}

// TestScenarioReadsDocsBeside: a case's documents come from docs/ beside its file, not from the
// caller's folder.
func TestScenarioReadsDocsBeside(t *testing.T) {
	top := Scenario(t, filepath.Join(cases, "skewed.in.yaml"))
	if len(top.Upstreams) == 0 {
		t.Fatalf("no upstreams from %s", filepath.Join(cases, "skewed.in.yaml"))
	}
	if len(top.Skewed()) == 0 {
		t.Errorf("skewed.in.yaml built no skewed resource: its /apis documents were not read")
	}
}
