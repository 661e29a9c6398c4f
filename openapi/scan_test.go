package openapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// splitObject agrees with json.Unmarshal into map[string]json.RawMessage on valid objects.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}] } `, `{"a\"b":"x\\","c":{"d":[[]]}}`, `{"\u0061":true,"a":null}`,
		`{"a":"\\\"}"}`, `[1]`, `{"a":}`, `{"a":{"b":[}]}}`, `{"a":1}x`, `{"a":"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal([]byte(s), &want)
		if wantErr != nil || want == nil {
			return // splitObject may accept some invalid inputs: the encoder validates what it serves
		}
		got, err := splitObject([]byte(s))
		if err != nil {
			t.Fatalf("%q: %v, json.Unmarshal accepts it", s, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, want %d", s, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(bytes.TrimSpace(got[k]), v) {
				t.Fatalf("%q: member %q = %s, want %s", s, k, got[k], v)
			}
		}
	})
}

func TestSplitObjectRejects(t *testing.T) {
	for s, want := range map[string]string{
		`[1]`: "not a JSON object", `{"a":}`: "offset 5: want a value", `{"a":{"b":[}]}}`: "offset 11: unbalanced }",
		`{"a":1}x`: "offset 7: data after the object", `{"a":"`: "unterminated string", `{"a" 1}`: "offset 5: want ':'",
		`{"a":1,}`: "offset 7: want a member name", `{a:1}`: "offset 1: want a member name", ``: "not a JSON object",
		`"x"`: "not a JSON object",
		`{"a":` + strings.Repeat("[", maxNesting+1) + strings.Repeat("]", maxNesting+1) + `}`: "JSON nested too deeply",
	} {
		if _, err := splitObject([]byte(s)); err == nil || err.Error() != want {
			t.Errorf("%.40q: error %v, want %q", s, err, want)
		}
	}
}

// A merge whose inputs hide invalid JSON in a member the scanner does not walk is refused by the
// encoder: nothing invalid is ever served.
func TestMergeOpenAPIInvalidMember(t *testing.T) {
	// The path is the key's own, so the refusal is the encoder's (a foreign path is refused earlier).
	bad := &Spec{JSON: []byte(`{"paths":{"/apis/g/v1/a":{"get":tru}},"components":{"schemas":{}}}`), Hash: "bad"}
	if _, err := Merge("apis/g/v1", []*Spec{bad}, time.Unix(1, 0)); err == nil || !strings.Contains(err.Error(), "invalid character '}' in literal true") {
		t.Errorf("invalid member: error %v, want the encoder's refusal of the invalid literal", err)
	}
}

// The memo returns the document merging again would (same bytes, same Built), stays bounded, and a
// changed input misses it.
func TestMergeMemo(t *testing.T) {
	m := NewMemo(MemoEntries, MemoBytes)
	full := loadCaptured(t, v136).docs[keyAdmission]
	old := loadCaptured(t, v135).docs[keyAdmission]
	first, err := m.Merge(keyAdmission, []*Spec{full, old}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.Merge(keyAdmission, []*Spec{full, old}, time.Unix(2, 0))
	if again != first {
		t.Error("same inputs merged again")
	}
	fresh, _ := Merge(keyAdmission, []*Spec{full, old}, time.Unix(2, 0))
	if !bytes.Equal(fresh.JSON, first.JSON) || !fresh.Built.Equal(first.Built) {
		t.Error("memo differs from a fresh merge")
	}
	// The same document fetched again (a new Built, the same hash): the same merged bytes, one copy,
	// the Built of the first merge.
	refetched := *old
	refetched.Built = old.Built.Add(time.Hour)
	shared, _ := m.Merge(keyAdmission, []*Spec{full, &refetched}, time.Unix(3, 0))
	if shared != first {
		t.Error("a refetched input with the same hash merged again: another copy of the same bytes")
	}
	other, _ := m.Merge(keyAdmission, []*Spec{old, full}, time.Unix(1, 0))
	if other == first || bytes.Equal(other.JSON, first.JSON) {
		t.Error("another input order hit the memo")
	}
	total := 0
	for i := range 2 * MemoEntries {
		doc := spec(t, `{"paths":{},"components":{"schemas":{"n":{"description":"`+strings.Repeat("x", i)+`"}}}}`)
		got, err := m.Merge("apis/g/v1", []*Spec{doc}, time.Unix(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		if i >= MemoEntries {
			total += len(got.JSON)
		}
	}
	if n, size := m.Len(), m.Bytes(); n != MemoEntries || size != total {
		t.Errorf("memo holds %d entries, %d bytes, want %d entries of the last %d bytes merged", n, size, MemoEntries, total)
	}
}

// Past its byte bound the memo drops the least recently used documents, and a nil memo merges.
func TestMergeMemoBytes(t *testing.T) {
	doc := func(n int) *Spec {
		return spec(t, `{"paths":{},"components":{"schemas":{"n":{"description":"`+strings.Repeat("x", n)+`"}}}}`)
	}
	a, _ := Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0))
	m := NewMemo(MemoEntries, 2*len(a.JSON)+10)
	first, _ := m.Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0))
	m.Merge("apis/g/v1", []*Spec{doc(101)}, time.Unix(1, 0))
	m.Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0)) // used: the other is the oldest
	m.Merge("apis/g/v1", []*Spec{doc(102)}, time.Unix(1, 0))
	if m.Len() != 2 || m.Bytes() > 2*len(a.JSON)+10 {
		t.Errorf("memo holds %d documents, %d bytes, want 2 within %d", m.Len(), m.Bytes(), 2*len(a.JSON)+10)
	}
	if again, _ := m.Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0)); again != first {
		t.Error("the most recently used document was dropped")
	}
	var none *Memo
	x, _ := none.Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0))
	y, _ := none.Merge("apis/g/v1", []*Spec{doc(100)}, time.Unix(1, 0))
	if x == y || !bytes.Equal(x.JSON, y.JSON) {
		t.Error("a nil memo kept a document, or merged differently")
	}
}
