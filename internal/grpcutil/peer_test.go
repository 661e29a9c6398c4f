package grpcutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/skewgate/skewgate/internal/testuid"
)

// dialEnv makes the test binary a client: it calls Health.Check on the unix socket it names and
// prints the gRPC code (TestUnixPeerWithAnotherUIDIsRefused runs it as another uid).
const dialEnv = "GRPCUTIL_TEST_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(dialEnv); path != "" {
		fmt.Print(check("unix://" + path))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// check calls Health.Check at target and returns the resulting gRPC code.
func check(target string) codes.Code {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return codes.Internal
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return status.Code(err)
}

// serveHealth serves the health service with c on lis.
func serveHealth(t *testing.T, lis net.Listener, c grpc.ServerOption) {
	g := grpc.NewServer(c)
	healthpb.RegisterHealthServer(g, health.NewServer())
	done := make(chan struct{})
	go func() { g.Serve(lis); close(done) }()
	t.Cleanup(func() { g.Stop(); <-done })
}

// socketpair returns the server end of a connected unix socket pair, as a listener would accept it:
// the kernel records this process as its peer.
func socketpair(t *testing.T) net.Conn {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := os.NewFile(uintptr(fds[1]), "client")
	t.Cleanup(func() { client.Close() })
	f := os.NewFile(uintptr(fds[0]), "server")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPeerCredentials: the check reads the real SO_PEERCRED of a socket pair. This process's uid
// is admitted when it is skewgate's own or configured, refused otherwise, with the uid named.
func TestPeerCredentials(t *testing.T) {
	me := uint32(os.Geteuid())
	other := me + 1000
	refused := RefusedMetric()
	for _, c := range []struct {
		name    string
		own     uint32
		allowed []uint32
		ok      bool
	}{
		{"own uid", me, nil, true},
		{"configured uid", other, []uint32{me}, true},
		{"another uid", other, []uint32{other + 1}, false},
	} {
		creds := NewCredentials("test", Peers{UIDs: c.allowed}, nil, refused, nil).(*peerCreds)
		creds.uids[0] = c.own // stands in for skewgate running as another user
		_, info, err := creds.ServerHandshake(socketpair(t))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.ok && info.(unixAuthInfo).UID != me:
			t.Errorf("%s: AuthInfo uid %d, want %d", c.name, info.(unixAuthInfo).UID, me)
		case !c.ok && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("peer uid %d is not", me))):
			t.Errorf("%s: got %v, want a refusal naming uid %d", c.name, err, me)
		}
	}
	if n := testutil.ToFloat64(refused.WithLabelValues("test", RefusedPeerUID)); n != 1 {
		t.Errorf("refused (peer_uid) = %v, want 1", n)
	}
}

// TestUnixPeerWithAnotherUIDIsRefused: a client running as another uid connects to a gRPC server on
// a unix socket that file permissions leave open to everyone: the server refuses it before gRPC,
// counts it and logs it; the same server answers a client of its own uid.
func TestUnixPeerWithAnotherUIDIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another uid; TestPeerCredentials covers the check")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "grpc.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o777); err != nil { // only the peer check stands in the way
		t.Fatal(err)
	}
	refused := RefusedMetric()
	serveHealth(t, lis, grpc.Creds(NewCredentials("test", Peers{}, nil, refused, nil)))

	if got := check("unix://" + path); got != codes.OK {
		t.Fatalf("a client of skewgate's own uid got %v, want OK", got)
	}
	if got := testuid.RunAsNobody(t, dir, dialEnv+"="+path); got != codes.Unavailable.String() {
		t.Errorf("a client as uid 65534 got %q, want Unavailable (connection refused before gRPC)", got)
	}
	if n := testutil.ToFloat64(refused.WithLabelValues("test", RefusedPeerUID)); n < 1 {
		t.Errorf("refused (peer_uid) = %v, want at least 1", n)
	}
}

// TestPlaintextLoopbackTCP: plaintext gRPC on loopback TCP is refused unless allowed.
func TestPlaintextLoopbackTCP(t *testing.T) {
	for _, allow := range []bool{false, true} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refused := RefusedMetric()
		serveHealth(t, lis, grpc.Creds(NewCredentials("test", Peers{PlaintextLoopback: allow}, nil, refused, nil)))
		got := check(lis.Addr().String())
		n := testutil.ToFloat64(refused.WithLabelValues("test", RefusedPlaintextTCP))
		switch {
		case allow && (got != codes.OK || n != 0):
			t.Errorf("allowed: got %v with %v refusals, want OK", got, n)
		case !allow && (got != codes.Unavailable || n < 1):
			t.Errorf("by default: got %v with %v refusals, want Unavailable and a plaintext_tcp refusal", got, n)
		}
	}
}

// TestPlaintextLoopbackRefusalNamesTheFlag: the refusal says what to do.
func TestPlaintextLoopbackRefusalNamesTheFlag(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	dialed := make(chan net.Conn, 1)
	go func() {
		c, _ := net.Dial("tcp", lis.Addr().String())
		dialed <- c
	}()
	c, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := <-dialed; d != nil {
		defer d.Close()
	}
	_, _, err = NewCredentials("test", Peers{}, nil, nil, nil).ServerHandshake(c)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), PlaintextLoopbackFlag) {
		t.Errorf("got %v, want a refusal naming %s", err, PlaintextLoopbackFlag)
	}
}
