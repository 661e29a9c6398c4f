//go:build !linux

package grpcutil

import (
	"errors"
	"net"
	"os"
)

// peerUID is implemented on Linux only: elsewhere every unix socket peer is refused.
func peerUID(*net.UnixConn) (uint32, error) {
	return 0, errors.New("peer credentials are only read on Linux")
}

func ownUID() uint32 { return uint32(os.Geteuid()) }
