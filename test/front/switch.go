package front

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// Mode is what a Switch does with connections.
type Mode int

const (
	// Forward pipes every connection to the target.
	Forward Mode = iota
	// Refuse closes every connection and answers new ones by closing them: the service is down.
	Refuse
	// Hang accepts connections and never answers on them (no byte read or written): the service
	// is hung. Envoy's ext_proc filter then waits for message_timeout and fails open.
	Hang
)

// Switch is a TCP proxy before one of skewgate's services (ext_proc, xDS) whose behaviour a test
// changes while traffic flows: down, hung, or back.
type Switch struct {
	Addr   string
	target string
	lis    net.Listener

	mu    sync.Mutex
	mode  Mode
	conns map[net.Conn]bool
	// Refused and Held count connections turned away (Refuse) and held unanswered (Hang).
	Refused, Held atomic.Int64
}

// NewSwitch listens on 127.0.0.1 and forwards to target, host:port or unix:///path.
func NewSwitch(target string) (*Switch, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Switch{Addr: lis.Addr().String(), target: target, lis: lis, conns: map[net.Conn]bool{}}
	go s.serve()
	return s, nil
}

// Set changes the mode; every open connection is cut, so each later stream meets the new mode.
func (s *Switch) Set(m Mode) {
	s.mu.Lock()
	s.mode = m
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	s.mu.Unlock()
}

// Close stops the switch and cuts every connection.
func (s *Switch) Close() {
	s.lis.Close()
	s.Set(Refuse)
}

func (s *Switch) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode == Refuse {
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Switch) serve() {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		mode := s.mode
		s.mu.Unlock()
		if !s.track(c) {
			s.Refused.Add(1)
			c.Close()
			continue
		}
		if mode == Hang {
			s.Held.Add(1)
			continue // held open until the mode changes
		}
		go s.pipe(c)
	}
}

func (s *Switch) pipe(c net.Conn) {
	network, addr := "tcp", s.target
	if path, ok := strings.CutPrefix(s.target, "unix://"); ok {
		network, addr = "unix", path
	}
	up, err := net.Dial(network, addr)
	if err != nil {
		c.Close()
		return
	}
	if !s.track(up) {
		up.Close()
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, up)
	s.mu.Unlock()
}
