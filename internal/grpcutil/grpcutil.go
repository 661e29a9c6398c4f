// Package grpcutil holds what skewgate's two gRPC servers (xDS and ext_proc) share: keepalive and
// stream limits, and a graceful stop bounded in time.
package grpcutil

import (
	"context"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ServerOptions are keepalive, a per-connection stream limit and a message size bound, followed by
// extra (credentials).
func ServerOptions(maxStreams uint32, maxRecvBytes int, extra ...grpc.ServerOption) []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		// A fixed pool of stream workers instead of a goroutine per stream: ext_proc opens one stream
		// per HTTP request, and reusing warm goroutines cuts tail latency under load.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.SharedWriteBuffer(true),
	}, extra...)
}

// Serve serves on lis until ctx ends, then stops gracefully: new streams are refused, open ones get
// drain to finish, and the rest are cut.
func Serve(ctx context.Context, g *grpc.Server, lis net.Listener, drain time.Duration) error {
	if drain <= 0 {
		drain = 10 * time.Second
	}
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(drain):
		g.Stop()
	}
	return <-errc
}
