package front

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/skewgate/skewgate/test/testbed"
)

// roundRobin is the control: a TCP load balancer that sends each connection to the next apiserver in
// turn (haproxy in TCP mode in front of an HA control plane). TLS is end to end.
type roundRobin struct {
	addr string
	lis  net.Listener
	wg   sync.WaitGroup
}

func startRoundRobin(ip net.IP, servers []testbed.Apiserver) (*roundRobin, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(Port)))
	if err != nil {
		return nil, err
	}
	rr := &roundRobin{addr: lis.Addr().String(), lis: lis}
	var next atomic.Uint64
	rr.wg.Add(1)
	go func() {
		defer rr.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			target := servers[next.Add(1)%uint64(len(servers))].Address()
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); done <- struct{}{} }()
				go func() { io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return rr, nil
}

func (rr *roundRobin) close() {
	rr.lis.Close()
	rr.wg.Wait()
}
