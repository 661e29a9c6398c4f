package xds

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// hashOrder fixes the order in which contentHash reads the resource types.
var hashOrder = []resourcev3.Type{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.SecretType}

// contentHash identifies the resources of a snapshot, so an unchanged translation publishes nothing:
// equal resources hash alike, and resources that differ in any field hash apart (but for a SHA-256
// collision).
//
// It is a Merkle tree over the messages, not one hash of their marshalled bytes: the clusters of a
// translation share most of their sub-messages by pointer (transport sockets, protocol options,
// health checks, the endpoints of every upstream: clusters.go, endpoints.go), and marshalling every
// cluster would encode the shared parts once per cluster. Each distinct message (by pointer) is
// digested once, and a cluster names its shared parts by their digests. A message's digest is
// SHA-256 over its deterministic marshalling, except for the types under which the sharing happens
// (splitTypes): their digest covers the deterministic marshalling of their fields that hold no message,
// their unknown fields, and then, for each field that holds messages in the order the type declares
// them, how many it holds and each one's digest (a map's by key order). Either encoding reads back
// into the same fields, so two messages share a digest only if they are equal field by field, which
// is when their deterministic marshalling (what Envoy receives) is equal too.
// TestContentHashAgreesWithMarshal and TestContentHashSeesEveryField check both.
func contentHash(resources map[resourcev3.Type][]types.Resource) string {
	return newMerkle().sum(resources)
}

// merkle digests messages, each distinct one (by pointer) once per sum. It is not safe for
// concurrent use; the server's publishes, one at a time, share one.
type merkle struct {
	memo map[proto.Message]digest
	// scratch space, reused: per split type a residual and a digest's input; marshalled bytes.
	scratch map[reflect.Type]*scratch
	marshal []byte
}

type scratch struct {
	residual reflect.Value
	input    []byte
}

type digest = [sha256.Size]byte

func newMerkle() *merkle {
	return &merkle{memo: map[proto.Message]digest{}, scratch: map[reflect.Type]*scratch{}}
}

// sum is the contentHash of resources. It holds no message afterwards, but keeps its memo's
// capacity for the next translation.
func (h *merkle) sum(resources map[resourcev3.Type][]types.Resource) string {
	defer clear(h.memo)
	top := sha256.New()
	var b []byte
	for _, typ := range hashOrder {
		rs := resources[typ]
		b = protowire.AppendString(b[:0], typ)
		top.Write(protowire.AppendVarint(b, uint64(len(rs))))
		for _, r := range rs {
			d := h.digest(r)
			top.Write(d[:])
		}
	}
	return hex.EncodeToString(top.Sum(nil))
}

// Digest inputs start with what they cover.
const (
	markMarshalled = 1
	markSplit      = 2
)

var deterministic = proto.MarshalOptions{Deterministic: true}

func (h *merkle) digest(m proto.Message) digest {
	if d, ok := h.memo[m]; ok {
		return d
	}
	var d digest
	// A nil element of a list is marshalled (as nothing) rather than split.
	if s := splitTypes[reflect.TypeOf(m)]; s != nil && !reflect.ValueOf(m).IsNil() {
		d = h.digestSplit(m, s)
	} else {
		h.marshal = h.marshalAppend(append(h.marshal[:0], markMarshalled), m)
		d = sha256.Sum256(h.marshal)
	}
	h.memo[m] = d
	return d
}

func (h *merkle) marshalAppend(b []byte, m proto.Message) []byte {
	b, err := deterministic.MarshalAppend(b, m)
	if err != nil {
		// Only an invalid message fails to marshal, and such a snapshot cannot be served either:
		// Translate's validation refuses it first.
		panic("xds: content hash: " + err.Error())
	}
	return b
}

// digestSplit is the digest of m, a message of a split type: its fields without messages marshalled
// in a residual copy, and its message fields by digest.
func (h *merkle) digestSplit(m proto.Message, s *splitType) digest {
	v := reflect.ValueOf(m).Elem()
	sc := h.scratch[s.typ]
	if sc == nil {
		sc = &scratch{residual: reflect.New(s.typ)}
		h.scratch[s.typ] = sc
	}
	r := sc.residual
	for _, i := range s.plain {
		r.Elem().Field(i).Set(v.Field(i))
	}
	b := append(sc.input[:0], markSplit)
	h.marshal = h.marshalAppend(h.marshal[:0], r.Interface().(proto.Message))
	r.Elem().SetZero() // holds nothing of m's
	b = protowire.AppendBytes(b, h.marshal)
	b = protowire.AppendBytes(b, m.ProtoReflect().GetUnknown())
	for _, i := range s.messages {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Pointer:
			if f.IsNil() {
				b = protowire.AppendVarint(b, 0)
				continue
			}
			b = protowire.AppendVarint(b, 1)
			b = h.appendDigest(b, f)
		case reflect.Slice:
			b = protowire.AppendVarint(b, uint64(f.Len()))
			for j := range f.Len() {
				b = h.appendDigest(b, f.Index(j))
			}
		case reflect.Map:
			keys := f.MapKeys()
			slices.SortFunc(keys, compareKeys)
			b = protowire.AppendVarint(b, uint64(len(keys)))
			for _, k := range keys {
				b = appendKey(b, k)
				b = h.appendDigest(b, f.MapIndex(k))
			}
		}
	}
	sc.input = b
	return sha256.Sum256(b)
}

func (h *merkle) appendDigest(b []byte, v reflect.Value) []byte {
	d := h.digest(v.Interface().(proto.Message))
	return append(b, d[:]...)
}

// splitType is a message type digested by digestSplit: its exported fields that hold messages (a
// message, a list of them or a map to them) and the others (scalars, lists and maps of scalars,
// oneofs), by index in the Go struct. The exported fields of a generated message are its fields and
// its oneofs (protoc-gen-go); its state, size cache and unknown fields are unexported.
type splitType struct {
	typ             reflect.Type
	plain, messages []int
}

// splitTypes are the types under which the clusters share messages by pointer: the shapes of
// clusters.go, the endpoints of endpoints.go. Digesting every other type by its marshalling is
// faster; the choice, by type alone, decides only what is cheap. Reading the exported fields only,
// digestSplit never reads the size cache go-control-plane's streams write while they marshal a
// retained cluster (TestSharedMessagesStayIntact, under -race).
var splitTypes = map[reflect.Type]*splitType{}

func init() {
	for _, m := range []proto.Message{&clusterv3.Cluster{}, &endpointv3.ClusterLoadAssignment{}, &endpointv3.LocalityLbEndpoints{}} {
		t := reflect.TypeOf(m).Elem()
		s := &splitType{typ: t}
		for i := range t.NumField() {
			f := t.Field(i)
			switch {
			case !f.IsExported():
				// The message's state, size cache and unknown fields (which digestSplit reads
				// through protoreflect).
			case holdsMessages(f.Type):
				s.messages = append(s.messages, i)
			default:
				s.plain = append(s.plain, i)
			}
		}
		splitTypes[reflect.TypeOf(m)] = s
	}
}

var messageType = reflect.TypeFor[proto.Message]()

// holdsMessages: a field of Go type t is a message, a list of messages or a map to messages.
func holdsMessages(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer:
		return t.Implements(messageType)
	case reflect.Slice, reflect.Map:
		return t.Elem().Kind() == reflect.Pointer && t.Elem().Implements(messageType)
	}
	return false
}

// compareKeys orders the keys of one map field (all of one kind: a string, an integer or a bool).
func compareKeys(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.String:
		return cmp.Compare(a.String(), b.String())
	case reflect.Bool:
		return cmp.Compare(protowire.EncodeBool(a.Bool()), protowire.EncodeBool(b.Bool()))
	case reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

func appendKey(b []byte, k reflect.Value) []byte {
	switch k.Kind() {
	case reflect.String:
		return protowire.AppendString(b, k.String())
	case reflect.Bool:
		return protowire.AppendVarint(b, protowire.EncodeBool(k.Bool()))
	case reflect.Int32, reflect.Int64:
		return protowire.AppendVarint(b, uint64(k.Int()))
	}
	return protowire.AppendVarint(b, k.Uint())
}
