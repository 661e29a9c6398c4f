package grpcutil

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerUID reads the uid of the process at the other end of c as the kernel recorded it when that
// process connected (SO_PEERCRED, unix(7)); it cannot be forged from user space.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}

func ownUID() uint32 { return uint32(os.Geteuid()) }
