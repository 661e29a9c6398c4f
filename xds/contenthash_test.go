package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/xdstest"
)

// marshalHash is the plain content hash contentHash must agree with: SHA-256 over every resource's
// deterministic marshalling, each after its length.
func marshalHash(t testing.TB, rs *Resources) string {
	t.Helper()
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, m := range allResources(rs) {
		b, err := opts.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashOf(rs *Resources) string { return contentHash(snapshotResources(rs)) }

// TestContentHashAgreesWithMarshal: over the golden scenarios and synthetic Topologies of several
// sizes, two translations share a content hash exactly when their marshalled resources are equal.
func TestContentHashAgreesWithMarshal(t *testing.T) {
	var all []*Resources
	add := func(top *discovery.Topology, o Options) {
		rs, err := Translate(top, o)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs)
	}
	paths, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(paths) < 5 {
		t.Fatalf("scenarios: %v %v", paths, err)
	}
	for _, p := range paths {
		add(xdstest.Scenario(t, p), testOptions())
	}
	for _, n := range []int{1, 2, 3, 30} {
		add(syntheticTopology(n, 2), testOptions())
		add(syntheticTopology(n, 2), testOptions()) // a second translation of the same
	}
	o := testOptions()
	o.HealthCheckInterval *= 2 // a field of the shared health checks only
	add(syntheticTopology(30, 2), o)
	moved := syntheticTopology(30, 2)
	// One endpoint, the last of the all-cluster's 30 and of its set's.
	moved.Upstreams[29].Address = strings.Replace(moved.Upstreams[29].Address, ":6443", ":6444", 1)
	add(moved, testOptions())
	equalPairs := 0
	for i, a := range all {
		for j, b := range all[:i] {
			same, hashSame := marshalHash(t, a) == marshalHash(t, b), hashOf(a) == hashOf(b)
			if same != hashSame {
				t.Errorf("translations %d and %d: marshalled equal %v, content hash equal %v", i, j, same, hashSame)
			}
			if same {
				equalPairs++
			}
		}
	}
	if equalPairs < 4 {
		t.Errorf("%d equal pairs: the test no longer compares equal translations", equalPairs)
	}
}

// TestContentHashSeesEveryField: in a translation whose clusters share messages, clearing any
// populated field of any message (a shared one changes every cluster that holds it), or changing
// any scalar's value, changes the content hash; restored, the hash is the first one again. A copy
// of every resource, sharing nothing, hashes alike.
func TestContentHashSeesEveryField(t *testing.T) {
	rs, err := Translate(syntheticTopology(6, 1), testOptions()) // 6 endpoints in the all-cluster
	if err != nil {
		t.Fatal(err)
	}
	base := hashOf(rs)
	copied := &Resources{}
	for _, c := range rs.Clusters {
		copied.Clusters = append(copied.Clusters, proto.Clone(c).(*clusterv3.Cluster))
	}
	for _, r := range rs.Routes {
		copied.Routes = append(copied.Routes, proto.Clone(r).(*routev3.RouteConfiguration))
	}
	for _, l := range rs.Listeners {
		copied.Listeners = append(copied.Listeners, proto.Clone(l).(*listenerv3.Listener))
	}
	for _, s := range rs.Secrets {
		copied.Secrets = append(copied.Secrets, proto.Clone(s).(*tlsv3.Secret))
	}
	if got := hashOf(copied); got != base {
		t.Fatalf("a copy sharing nothing hashes %s, the original %s", got, base)
	}

	fields := 0
	check := func(what string, m protoreflect.Message, fd protoreflect.FieldDescriptor, saved protoreflect.Value) {
		t.Helper()
		if hashOf(rs) == base {
			t.Errorf("%s %s.%s: the content hash did not change", what, m.Descriptor().FullName(), fd.Name())
		}
		m.Set(fd, saved)
		if hashOf(rs) != base {
			t.Fatalf("%s.%s restored: the content hash is not the first one", m.Descriptor().FullName(), fd.Name())
		}
	}
	seen := map[proto.Message]bool{}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if seen[m.Interface()] {
			return
		}
		seen[m.Interface()] = true
		var fds []protoreflect.FieldDescriptor
		m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			fds = append(fds, fd)
			return true
		})
		for _, fd := range fds {
			fields++
			saved := copyValue(m, fd)
			m.Clear(fd)
			check("clearing", m, fd, saved)
			if v, ok := changed(fd, m.Get(fd)); ok {
				m.Set(fd, v)
				check("changing", m, fd, saved)
			}
			eachMessage(fd, m.Get(fd), walk)
		}
	}
	for _, m := range allResources(rs) {
		walk(m.ProtoReflect())
	}
	if fields < 200 {
		t.Errorf("%d fields tried: the translation no longer has the messages this test is about", fields)
	}
	t.Logf("%d populated fields of %d distinct messages cleared or changed", fields, len(seen))
}

// copyValue is a copy of m's field fd that survives clearing it.
func copyValue(m protoreflect.Message, fd protoreflect.FieldDescriptor) protoreflect.Value {
	v := m.Get(fd)
	switch {
	case fd.IsList():
		out := m.NewField(fd)
		for i := range v.List().Len() {
			out.List().Append(v.List().Get(i))
		}
		return out
	case fd.IsMap():
		out := m.NewField(fd)
		v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			out.Map().Set(k, e)
			return true
		})
		return out
	}
	return v
}

// changed is another value for the singular scalar field fd holding v.
func changed(fd protoreflect.FieldDescriptor, v protoreflect.Value) (protoreflect.Value, bool) {
	if fd.IsList() || fd.IsMap() {
		return v, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(v.String() + "x"), true
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append(slices.Clone(v.Bytes()), 'x')), true
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(!v.Bool()), true
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(v.Enum() + 1), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(v.Int()) + 1), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(v.Int() + 1), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v.Uint()) + 1), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(v.Uint() + 1), true
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v.Float()) + 1), true
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(v.Float() + 1), true
	}
	return v, false
}
