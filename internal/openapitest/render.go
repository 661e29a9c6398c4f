package openapitest

import "sync/atomic"

// HeldRender is a protobuf rendering (an openapi.FrontConfig.Render) that counts its calls and
// ends only when released, so a test holds a rendering in flight while requests race on it.
type HeldRender struct {
	calls   atomic.Int32
	release chan struct{}
	out     []byte
}

// NewHeldRender returns a held rendering whose every call, once released, answers out.
func NewHeldRender(out string) *HeldRender {
	return &HeldRender{release: make(chan struct{}), out: []byte(out)}
}

// Render is the rendering: it counts the call and waits for Release.
func (h *HeldRender) Render([]byte) ([]byte, error) {
	h.calls.Add(1)
	<-h.release
	return h.out, nil
}

// Release ends every held call and every later one at once; call it once.
func (h *HeldRender) Release() { close(h.release) }

// Calls is how many times Render was called.
func (h *HeldRender) Calls() int32 { return h.calls.Load() }
