package xds

import (
	"reflect"
	"slices"

	"github.com/skewgate/skewgate/xds/envoyconf"
)

// sharedValidator validates messages of one type that share parts by pointer (the apiserver clusters
// of a translation share their transport sockets, health checks, circuit breakers and more:
// apiserverShape) without validating a shared part again for every message that holds it.
//
// It is exact, not a sample. protoc-gen-validate checks every field of a message on its own (the
// field's own rules, then an embedded message's ValidateAll), and no rule relates two fields except
// that a required oneof is set. So a message is valid exactly when each of its fields is, and a field
// that holds the very value (the same message, list or map) that already passed in that field of a
// message validated before needs no second look. validate runs ValidateAll on a shallow copy with
// those fields cleared; oneofs and scalars are always checked. Clearing can only add an error (were a
// cleared field required), never hide one. Nothing may modify the messages while one
// sharedValidator is in use.
type sharedValidator[M envoyconf.Validator] struct {
	// fields are M's exported pointer, slice and map fields (oneofs are interfaces), each with the
	// values that passed in it, up to maxKnown of them: the first messages hold the shared values, and
	// a value not remembered is merely validated again.
	fields  []knownField
	scratch reflect.Value // an M's struct the shallow copies are made in
	skip    []int
	fresh   []freshValue
}

type freshValue struct {
	field int // in fields
	id    identity
}

type knownField struct {
	index  int
	passed []identity
}

// maxKnown bounds the values remembered per field, so a lookup is a short scan.
const maxKnown = 8

// identity is a field's value by identity: a message by its address, a list or map by the address
// and length of its contents.
type identity struct {
	ptr uintptr
	len int
}

func newSharedValidator[M envoyconf.Validator]() *sharedValidator[M] {
	t := reflect.TypeFor[M]().Elem()
	v := &sharedValidator[M]{scratch: reflect.New(t).Elem()}
	for i := range t.NumField() {
		f := t.Field(i)
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			if f.IsExported() {
				v.fields = append(v.fields, knownField{index: i})
			}
		}
	}
	return v
}

// validate is m.ValidateAll() without the fields whose values passed before.
func (v *sharedValidator[M]) validate(m M) error {
	src := reflect.ValueOf(m).Elem()
	v.skip, v.fresh = v.skip[:0], v.fresh[:0]
	for fi := range v.fields {
		kf := &v.fields[fi]
		f := src.Field(kf.index)
		if f.IsNil() {
			continue
		}
		id := identity{ptr: f.Pointer()}
		if f.Kind() != reflect.Pointer {
			id.len = f.Len()
		}
		switch {
		case slices.Contains(kf.passed, id):
			v.skip = append(v.skip, kf.index)
		case len(kf.passed) < maxKnown:
			v.fresh = append(v.fresh, freshValue{fi, id})
		}
	}
	rest := m
	if len(v.skip) > 0 {
		v.scratch.Set(src)
		for _, i := range v.skip {
			v.scratch.Field(i).SetZero()
		}
		rest = v.scratch.Addr().Interface().(M)
	}
	if err := rest.ValidateAll(); err != nil {
		return err
	}
	for _, f := range v.fresh {
		kf := &v.fields[f.field]
		kf.passed = append(kf.passed, f.id)
	}
	return nil
}
