package openapi

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Group order: highest version (unparsable lowest), then most members, then smallest hash.
func TestCompareOpenAPIGroups(t *testing.T) {
	v := func(s string) *utilversion.Version { x, _ := utilversion.ParseGeneric(s); return x }
	ordered := []*group{
		{hash: "Z", size: 1, version: v("v1.36.3")},
		{hash: "B", size: 2, version: v("v1.35.4")},
		{hash: "A", size: 1, version: v("v1.35.4")},
		{hash: "C", size: 1, version: v("v1.35.4")},
		{hash: "D", size: 5, version: nil}, // "garbage"
	}
	for i := range ordered {
		for j := range ordered {
			if got := compareGroups(ordered[i], ordered[j]); (got < 0) != (i < j) || (got == 0) != (i == j) {
				t.Errorf("compare(%s, %s) = %d", ordered[i].hash, ordered[j].hash, got)
			}
		}
	}
}

// Decide on its own, over synthetic upstreams: agreement, a whole ready group, a merge (wanted, then
// served), nobody ready, and a key never merged.
func TestDecide(t *testing.T) {
	v := func(s string) *utilversion.Version { x, _ := utilversion.ParseGeneric(s); return x }
	nw, old := loadCaptured(t, v136).docs[keyAdmission], loadCaptured(t, v135).docs[keyAdmission]
	index := func(h string) *Index { return &Index{Keys: map[string]string{"version": "V", keyAdmission: h}} }
	ups := func() []Upstream {
		return []Upstream{
			{Name: "new", Version: v("v1.36.3"), Ready: true, Index: index(nw.Hash)},
			{Name: "old", Version: v("v1.35.4"), Ready: true, Index: index(old.Hash)},
		}
	}
	members := func(is ...int) Members {
		m := NewMembers(2)
		for _, i := range is {
			m.Add(i)
		}
		return m
	}
	gv := "admissionregistration.k8s.io/v1"
	whole := Coverage{gv: {All: members(0), Count: []int{4, 2}}} // only new serves it all
	nobody := Coverage{gv: {All: members(), Count: []int{3, 2}}} // each lacks one resource
	at := time.Unix(100, 0)

	r := Decide(at, ups(), whole, nil)
	if d := r.Decisions["version"]; d.Action != ActionDefault || d.Hash != "V" {
		t.Errorf("version: %+v, want the default", d)
	}
	if d := r.Decisions[keyAdmission]; d.Action != ActionRoute || !slices.Equal(d.Members, members(0)) || d.Hash != nw.Hash {
		t.Errorf("whole group: %+v, want new", d)
	}
	if r.Index == nil || r.Wants != nil || r.Merged != nil {
		t.Errorf("index %v, wants %v, merged %v", r.Index != nil, r.Wants, r.Merged)
	}

	r = Decide(at, ups(), nobody, nil)
	if d := r.Decisions[keyAdmission]; d.Action != ActionRoute || !slices.Equal(d.Members, members(0)) || d.Hash != nw.Hash {
		t.Errorf("merge without documents: %+v, want the fallback (new, most resources)", d)
	}
	if want := map[string][]string{"new": {keyAdmission}, "old": {keyAdmission}}; !reflect.DeepEqual(r.Wants, want) || r.Degraded[keyAdmission] == "" {
		t.Errorf("wants %v degraded %v", r.Wants, r.Degraded)
	}

	held := ups()
	held[0].Docs, held[1].Docs = map[string]*Spec{keyAdmission: nw}, map[string]*Spec{keyAdmission: old}
	memo := NewMemo(MemoEntries, MemoBytes)
	r = Decide(at, held, nobody, memo)
	m := r.Merged[keyAdmission]
	if d := r.Decisions[keyAdmission]; d.Action != ActionServe || m == nil || d.Hash != m.Hash || !slices.Equal(d.Members, members(0)) {
		t.Fatalf("merge: %+v, merged %v", d, m != nil)
	}
	if again := Decide(at, held, nobody, memo).Merged[keyAdmission]; again != m || memo.Len() != 1 {
		t.Error("the same inputs merged again through the memo")
	}
	if !bytes.Contains(r.Index.JSON, []byte(DocumentURL(keyAdmission, m.Hash))) {
		t.Error("the index does not name the merged document")
	}

	down := ups()
	down[0].Ready, down[1].Ready = false, false
	if d := Decide(at, down, whole, nil).Decisions[keyAdmission]; d.Action != ActionUnavailable || d.Members != nil {
		t.Errorf("nobody ready, no documents held: %+v, want unavailable", d)
	}

	agg := slices.Clone(held)
	agg[1].Aggregated = []string{gv}
	r = Decide(at, agg, nobody, nil)
	if d := r.Decisions[keyAdmission]; d.Action != ActionRoute || r.Merged != nil || r.Wants != nil || r.Routed[keyAdmission] == "" {
		t.Errorf("aggregated: %+v, merged %v, wants %v, routed %v", d, r.Merged != nil, r.Wants, r.Routed)
	}
	if r := Decide(at, nil, nil, nil); r.Decisions != nil || r.Index != nil {
		t.Errorf("no upstreams: %+v", r)
	}
}
