package options

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// StaticUpstream is a parsed --static-upstream: an apiserver by name (its identity Lease's
// kubernetes.io/hostname) and host:port (the host an IP or a DNS name).
type StaticUpstream struct {
	Name    string
	Address string
}

// hostnameRE is the rule discovery matches a Lease's kubernetes.io/hostname with (discovery/leases.go).
var hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// ParseStaticUpstream parses "name=host:port".
func ParseStaticUpstream(s string) (StaticUpstream, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok {
		return StaticUpstream{}, fmt.Errorf("static upstream %q: want name=host:port", s)
	}
	if !hostnameRE.MatchString(name) {
		return StaticUpstream{}, fmt.Errorf("static upstream %q: name must be a lowercase DNS label or hostname (it matches the Lease's kubernetes.io/hostname)", s)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return StaticUpstream{}, fmt.Errorf("static upstream %q: address must be host:port", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return StaticUpstream{}, fmt.Errorf("static upstream %q: bad port %q", s, port)
	}
	return StaticUpstream{Name: name, Address: addr}, nil
}
