package xds

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/internal/xdstest"
)

func allResources(rs *Resources) []proto.Message {
	var out []proto.Message
	for _, l := range rs.Listeners {
		out = append(out, l)
	}
	for _, r := range rs.Routes {
		out = append(out, r)
	}
	for _, c := range rs.Clusters {
		out = append(out, c)
	}
	for _, s := range rs.Secrets {
		out = append(out, s)
	}
	return out
}

func marshalAll(t testing.TB, msgs []proto.Message) [][]byte {
	t.Helper()
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := cachev3.MarshalResource(m)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// eachMessage calls f with every message v, the value of field fd, holds: itself, or its list's or
// map's elements.
func eachMessage(fd protoreflect.FieldDescriptor, v protoreflect.Value, f func(protoreflect.Message)) {
	switch {
	case fd.IsList() && fd.Message() != nil:
		for i := range v.List().Len() {
			f(v.List().Get(i).Message())
		}
	case fd.IsMap() && fd.MapValue().Message() != nil:
		v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
			f(e.Message())
			return true
		})
	case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
		f(v.Message())
	}
}

// messagePointers lists every message reachable from msgs, by address.
func messagePointers(msgs []proto.Message) map[uintptr]string {
	out := map[uintptr]string{}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		p := reflect.ValueOf(m.Interface()).Pointer()
		if _, ok := out[p]; ok {
			return
		}
		out[p] = string(m.Descriptor().FullName())
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			eachMessage(fd, v, walk)
			return true
		})
	}
	for _, m := range msgs {
		walk(m.ProtoReflect())
	}
	return out
}

// TestSharedMessagesStayIntact: the apiserver clusters of a translation share messages (transport
// sockets, packed protocol options, health checks, endpoints), which is only safe while nothing
// writes to a resource after Translate returns. go-control-plane marshals a snapshot's resources
// lazily, from as many streams as are open, while the next translation runs; under -race this shows
// that neither writes to what the clusters share, and that what a snapshot serves afterwards is
// byte for byte what it held before; the content hash of the next publication reads the clusters
// it retains while they are served. Two translations share nothing with each other, so a cluster
// the server retains from an older snapshot is independent of the new ones.
func TestSharedMessagesStayIntact(t *testing.T) {
	top := syntheticTopology(20, 4)
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range rs.Clusters {
		byName[c.Name] = c
	}
	a, b := byName[wire.AllCluster], byName[wire.UpstreamCluster(top.Upstreams[0].Name)]
	if a.Name == b.Name || a.TransportSocket != b.TransportSocket || &a.HealthChecks[0] != &b.HealthChecks[0] {
		t.Fatalf("clusters %s and %s share no transport socket or health check: this test no longer covers shared messages", a.Name, b.Name)
	}
	msgs := allResources(rs)
	before := marshalAll(t, msgs)

	resources := map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType:  toResources(rs.Clusters),
		resourcev3.RouteType:    toResources(rs.Routes),
		resourcev3.ListenerType: toResources(rs.Listeners),
		resourcev3.SecretType:   toResources(rs.Secrets),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		wg.Go(func() { // a stream marshalling the snapshot
			for _, m := range msgs {
				if _, err := cachev3.MarshalResource(m); err != nil {
					errs <- err
				}
				proto.Size(m)
			}
		})
		wg.Go(func() { // a snapshot of the same resources, versioned per resource (delta xDS)
			snap, err := cachev3.NewSnapshot(fmt.Sprint(i), resources)
			if err == nil {
				err = snap.ConstructVersionMap()
			}
			if err == nil {
				err = snap.Consistent()
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Go(func() { // the next publication's content hash, which covers the clusters it retains
		contentHash(resources)
	})
	var next *Resources
	wg.Go(func() { // the next translation
		var err error
		if next, err = Translate(top, testOptions()); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for i, b := range marshalAll(t, msgs) {
		if !bytes.Equal(b, before[i]) {
			t.Errorf("resource %d changed while it was served", i)
		}
	}
	nextMsgs := allResources(next)
	for i, b := range marshalAll(t, nextMsgs) {
		if !bytes.Equal(b, before[i]) {
			t.Errorf("resource %d of the second translation differs from the first", i)
		}
	}
	first := messagePointers(msgs)
	for p, name := range messagePointers(nextMsgs) {
		if _, ok := first[p]; ok {
			t.Errorf("a %s is shared by two translations", name)
		}
	}
}

// TestTranslationIsByteStable: translating the same Topology twice gives the same bytes, so the
// server's content hash sees an unchanged translation as unchanged and publishes nothing
// (skewgate_xds_publishes_total{result="unchanged"}). Typed configs are packed deterministically:
// the local reply's JSON body is a Struct, whose map would otherwise be packed in random order.
func TestTranslationIsByteStable(t *testing.T) {
	for _, in := range []string{"testdata/three-two-sets.in.yaml", "testdata/skewed.in.yaml"} {
		top := xdstest.Scenario(t, in)
		hashes := map[string]bool{}
		for range 8 {
			rs, err := Translate(top, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			h := hashOf(rs)
			hashes[h] = true
		}
		if len(hashes) != 1 {
			t.Errorf("%s: 8 translations hash to %d different values", in, len(hashes))
		}
	}
}
