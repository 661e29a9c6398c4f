package openapi

import (
	"errors"
	"fmt"
)

// Error types (the fetch error label values discovery counts them by).
const (
	ErrStatus   = "status"    // an answer other than the ones handler3 and the aggregator give
	ErrTooLarge = "too_large" // a body over its limit
	ErrDecode   = "decode"    // not JSON, or not a JSON object
	ErrInvalid  = "invalid"   // JSON, but not what handler3 or the aggregator writes
	// ErrMoved: a document's hash is no longer the one the upstream publishes (301): its index moved.
	ErrMoved = "moved"
	// ErrIntegrity: a document's bytes or ETag do not match the hash its index names, or the hash is
	// not a SHA-512 that could be checked.
	ErrIntegrity = "integrity"
)

// Error is a refused index or document, with its type.
type Error struct {
	Type string
	Err  error
}

func (e *Error) Error() string { return e.Type + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errorf(typ, format string, args ...any) error {
	return &Error{Type: typ, Err: fmt.Errorf(format, args...)}
}

// ErrOverBudget: holding the document would exceed the Store's budget.
var ErrOverBudget = errors.New("the OpenAPI documents held would exceed the memory budget (MaxOpenAPIBytes)")
