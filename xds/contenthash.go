package xds

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// hashOrder fixes the order in which contentHash reads the resource types.
var hashOrder = []resourcev3.Type{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.SecretType}

// contentHash identifies the resources of a snapshot, so an unchanged translation publishes nothing:
// equal resources hash alike, and resources that differ in any field hash apart (but for a SHA-256
// collision).
//
// It is a Merkle tree over the messages, not a hash of their marshalled bytes: the clusters of a
// translation share most of their sub-messages by pointer (transport sockets, protocol options,
// health checks, the endpoints of every upstream: clusters.go, endpoints.go), and marshalling each
// cluster would encode the 1000 endpoints of the all-cluster once per twin, and every endpoint once
// per cluster it is in. A message is digested once per pointer and its parents name it by digest.
// The digest of a message is SHA-256 over its populated fields in field-number order, each its
// number and then its value, self-delimiting for its kind (lengths before strings, bytes and lists,
// map entries sorted by key, a sub-message's digest), and its unknown fields: the encoding can be
// read back into the same fields, so two messages share a digest only if they are equal field by
// field, which is when their deterministic marshalling (what Envoy receives) is equal too.
func contentHash(resources map[resourcev3.Type][]types.Resource) string {
	return newMerkle().sum(resources)
}

// sum is the contentHash of resources. It holds no message afterwards, but keeps its memo's
// capacity for the next translation.
func (h *merkle) sum(resources map[resourcev3.Type][]types.Resource) string {
	defer clear(h.memo)
	top := sha256.New()
	var n [binary64]byte
	for _, typ := range hashOrder {
		rs := resources[typ]
		top.Write(protowire.AppendString(n[:0], typ))
		top.Write(protowire.AppendVarint(n[:0], uint64(len(rs))))
		for _, r := range rs {
			d := h.digest(r.ProtoReflect(), 0)
			top.Write(d[:])
		}
	}
	return hex.EncodeToString(top.Sum(nil))
}

const binary64 = 64

type digest = [sha256.Size]byte

// merkle digests messages, each distinct one (by pointer) once.
type merkle struct {
	memo map[proto.Message]digest
	// bufs and fields are scratch space per depth of the message tree.
	bufs   [][]byte
	fields [][]field
	leaf   []byte
}

// walked reports the messages digested field by field: those under which the clusters share
// sub-messages by pointer (the shapes of clusters.go, the endpoints of endpoints.go). Every other
// message is digested by its deterministic marshalling, which is faster than reading its fields one
// by one. Both are exact; the choice, by type alone, decides only what is cheap.
func walked(m proto.Message) bool {
	switch m.(type) {
	case *clusterv3.Cluster, *endpointv3.ClusterLoadAssignment:
		return true
	}
	return false
}

// leafMark starts what a marshalled message's digest covers
const leafMark = 1

var deterministic = proto.MarshalOptions{Deterministic: true}

type field struct {
	fd protoreflect.FieldDescriptor
	v  protoreflect.Value
}

func newMerkle() *merkle { return &merkle{memo: map[proto.Message]digest{}} }

func (h *merkle) digest(m protoreflect.Message, depth int) digest {
	key := m.Interface()
	if d, ok := h.memo[key]; ok {
		return d
	}
	if !walked(key) {
		var err error
		b := h.leaf[:0]
		b = append(b, leafMark)
		if b, err = deterministic.MarshalAppend(b, key); err != nil {
			// Only an invalid message fails to marshal, and then the snapshot cannot be served
			// either: NewSnapshot's consistency check or the stream's marshalling reports it.
			panic(err)
		}
		d := sha256.Sum256(b)
		h.leaf = b
		h.memo[key] = d
		return d
	}
	if depth == len(h.bufs) {
		h.bufs = append(h.bufs, nil)
		h.fields = append(h.fields, nil)
	}
	fs := h.fields[depth][:0]
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fs = append(fs, field{fd, v})
		return true
	})
	if byNumber := func(a, b field) int { return cmp.Compare(a.fd.Number(), b.fd.Number()) }; !slices.IsSortedFunc(fs, byNumber) {
		slices.SortFunc(fs, byNumber)
	}
	b := h.bufs[depth][:0]
	for _, f := range fs {
		b = protowire.AppendVarint(b, uint64(f.fd.Number()))
		switch {
		case f.fd.IsList():
			l := f.v.List()
			b = protowire.AppendVarint(b, uint64(l.Len()))
			for i := range l.Len() {
				b = h.value(b, f.fd, l.Get(i), depth)
			}
		case f.fd.IsMap():
			b = h.mapEntries(b, f.fd, f.v.Map(), depth)
		default:
			b = h.value(b, f.fd, f.v, depth)
		}
	}
	if u := m.GetUnknown(); len(u) > 0 {
		// Field number 0 is no field's: the unknown bytes follow.
		b = protowire.AppendVarint(b, 0)
		b = protowire.AppendBytes(b, u)
	}
	d := sha256.Sum256(b)
	h.bufs[depth], h.fields[depth] = b, fs
	h.memo[key] = d
	return d
}

// value appends one value of fd (an element if fd is a list) to b.
func (h *merkle) value(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		d := h.digest(v.Message(), depth+1)
		return append(b, d[:]...)
	case protoreflect.StringKind:
		return protowire.AppendString(b, v.String())
	case protoreflect.BytesKind:
		return protowire.AppendBytes(b, v.Bytes())
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, protowire.EncodeBool(v.Bool()))
	case protoreflect.EnumKind:
		return protowire.AppendVarint(b, uint64(v.Enum()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protowire.AppendVarint(b, uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protowire.AppendVarint(b, v.Uint())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return protowire.AppendFixed64(b, math.Float64bits(v.Float()))
	}
	panic("xds: content hash of an unknown field kind " + fd.Kind().String())
}

// mapEntries appends the entries of m, a map field fd, sorted by key.
func (h *merkle) mapEntries(b []byte, fd protoreflect.FieldDescriptor, m protoreflect.Map, depth int) []byte {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, compareMapKeys)
	b = protowire.AppendVarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = h.value(b, fd.MapKey(), k.Value(), depth)
		b = h.value(b, fd.MapValue(), m.Get(k), depth)
	}
	return b
}

// compareMapKeys orders the keys of one map (all of one kind: bool, integer or string).
func compareMapKeys(a, b protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return cmp.Compare(x, b.String())
	case bool:
		return cmp.Compare(protowire.EncodeBool(x), protowire.EncodeBool(b.Bool()))
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}
