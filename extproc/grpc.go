package extproc

import (
	"context"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/skewgate/skewgate/internal/grpcutil"
)

// GRPCOptions tune the gRPC server Envoy connects to.
type GRPCOptions struct {
	// MaxConcurrentStreams per connection; Envoy multiplexes every request's stream over few
	// connections, and Envoy < 1.37 keeps one open per WATCH [100000].
	MaxConcurrentStreams uint32
	// DrainTimeout bounds the graceful stop: open streams (watches) get this long to end [10s].
	DrainTimeout time.Duration
	// Extra server options (credentials).
	ServerOptions []grpc.ServerOption
}

// NewGRPCServer returns a gRPC server with s registered, keepalive enforced and stream limits set.
func NewGRPCServer(s *Server, o GRPCOptions) *grpc.Server {
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 100000
	}
	// Header-only messages are small (Envoy's request and response header limits default to 60 KiB);
	// refuse anything absurd. The stream limit bounds streams, not work: until an apiserver has
	// authorized a request its stream holds only the few headers read from it, and the work that
	// grows with what is asked, the front's own answers, is bounded by the server's serving slots
	// (frontlimit.go), not by how many streams are open.
	g := grpc.NewServer(grpcutil.ServerOptions(o.MaxConcurrentStreams, 1<<20, o.ServerOptions...)...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	return g
}

// Serve serves on lis until ctx ends, then stops gracefully: new streams are refused, open ones get
// drain to finish, and the rest are cut.
func Serve(ctx context.Context, g *grpc.Server, lis net.Listener, drain time.Duration) error {
	return grpcutil.Serve(ctx, g, lis, drain)
}
