package grpcutil

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// CheckEndpoint validates a gRPC endpoint between Envoy and skewgate: addr is host:port or
// unix:///absolute/path; the mTLS files are all given or none; and without them the address must be
// a unix socket or loopback, because plaintext gRPC is only acceptable on the same host. what names
// the endpoint in the errors ("ext_proc address", "--xds-listen", ...), filesHint its TLS files.
func CheckEndpoint(what, addr, filesHint string, tlsFiles ...string) []error {
	var errs []error
	set := 0
	for _, f := range tlsFiles {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != len(tlsFiles) {
		errs = append(errs, fmt.Errorf("%s: mTLS needs all of %s, or none", what, filesHint))
	}
	local, err := IsLocal(addr)
	switch {
	case addr == "":
		errs = append(errs, fmt.Errorf("%s is required", what))
	case err != nil:
		errs = append(errs, fmt.Errorf("%s %q: %w", what, addr, err))
	case !local && set == 0:
		errs = append(errs, fmt.Errorf("%s %q is not loopback or a unix socket: plaintext gRPC is only allowed on the same host; give %s", what, addr, filesHint))
	}
	return errs
}

// IsLocal reports whether addr is a unix socket (unix:///absolute/path) or a loopback host:port.
func IsLocal(addr string) (bool, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return false, errors.New("unix socket path must be absolute")
		}
		return true, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || host == "" || (p == 0 && port != "0") {
		return false, errors.New("want host:port")
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback()), nil
}

// IsLoopbackTCP reports whether addr is a loopback host:port (not a unix socket).
func IsLoopbackTCP(addr string) bool {
	local, err := IsLocal(addr)
	return err == nil && local && !strings.HasPrefix(addr, "unix://")
}
