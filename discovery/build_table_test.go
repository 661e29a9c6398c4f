package discovery

import (
	"reflect"
	"testing"
	"time"

	"github.com/skewgate/skewgate/decision"
)

// copyFacts gives every upstream its own copy of its documents, with no hash: nothing is shared.
func copyFacts(facts []UpstreamFacts) []UpstreamFacts {
	out := make([]UpstreamFacts, len(facts))
	for i, f := range facts {
		out[i] = f
		for _, d := range []**Document{&out[i].API, &out[i].APIs} {
			if *d != nil {
				c := **d
				c.Hash = ""
				*d = &c
			}
		}
	}
	return out
}

// TestBuildReadsSharedDocumentsOnce: Build reads each distinct document once for all the upstreams
// that serve it, and decides exactly as it does when every upstream has a copy of its own.
func TestBuildReadsSharedDocumentsOnce(t *testing.T) {
	facts := syntheticFacts(40, 120, 4)
	facts[3].Ready = false // a set with an unready member
	shared := Build("v", time.Unix(0, 0), facts)
	copied := Build("v", time.Unix(0, 0), copyFacts(facts))
	if !reflect.DeepEqual(shared.Upstreams, copied.Upstreams) || !reflect.DeepEqual(shared.Sets, copied.Sets) {
		t.Errorf("upstreams or sets differ:\n%+v %+v\n%+v %+v", shared.Upstreams[:2], shared.Sets, copied.Upstreams[:2], copied.Sets)
	}
	if !reflect.DeepEqual(shared.Table().Rows(), copied.Table().Rows()) {
		t.Errorf("tables differ:\n%+v\n%+v", shared.Table().Rows(), copied.Table().Rows())
	}
	if shared.APIs.ETag != copied.APIs.ETag || shared.API.ETag != copied.API.ETag {
		t.Error("merged discovery differs")
	}
	if len(shared.Skewed()) == 0 || shared.Upstreams[0].Resources == 0 {
		t.Fatalf("nothing skewed (%d) or no resources counted: the fixture proves nothing", len(shared.Skewed()))
	}
}

// TestBuildKeepsAPIAndAPIsApart: an upstream whose /api and /apis bodies are equal (equal hashes)
// counts the keys of both, as one whose documents differ.
func TestBuildKeepsAPIAndAPIsApart(t *testing.T) {
	f := upstream("a", true, true)
	same := *f.API
	same.Hash = f.APIs.Hash
	f.API = &same
	top := Build("v", time.Unix(0, 0), []UpstreamFacts{f, upstream("b", true, true)})
	want := Build("v", time.Unix(0, 0), []UpstreamFacts{upstream("a", true, true), upstream("b", true, true)})
	if got, w := top.Upstreams[0].Resources, want.Upstreams[0].Resources; got != w {
		t.Errorf("resources %d, want %d", got, w)
	}
}

// TestTopologyTableIsCompiledOnce: every reader of a Topology gets the one table Build compiled, and
// the Topology's own answers are the table's.
func TestTopologyTableIsCompiledOnce(t *testing.T) {
	top := Build("t-7", time.Unix(0, 0), []UpstreamFacts{upstream("old", true, false), upstream("new", true, true)})
	if top.Table() != top.Table() || top.Table().Version() != "t-7" {
		t.Fatalf("table %p then %p, version %q", top.Table(), top.Table(), top.Table().Version())
	}
	for _, verb := range []string{"get", "list", "watch", "create"} {
		if got, want := top.Decide(keyMAP, verb), top.Table().Resource(keyMAP, verb); got != want || got.Action != ActionRoute || got.Set != "new" {
			t.Errorf("%s: Decide %+v, table %+v, want a route to new", verb, got, want)
		}
	}
	if (&Topology{}).Table() != decision.Empty {
		t.Error("a Topology not made by Build has a table of its own")
	}
}

func BenchmarkBuild1000x600(b *testing.B) {
	facts := syntheticFacts(1000, 600, 10)
	b.ReportAllocs()
	for b.Loop() {
		Build("v", time.Now(), facts)
	}
}
