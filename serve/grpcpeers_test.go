package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/skewgate/skewgate/internal/testuid"
	"github.com/skewgate/skewgate/serve/options"
)

// extprocDialEnv makes the test binary a fake Envoy on the ext_proc socket it names: it sends one
// request's headers and prints the gRPC code of the answer.
const extprocDialEnv = "SKEWGATE_TEST_EXTPROC_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(extprocDialEnv); path != "" {
		fmt.Print(askExtProc("unix://" + path))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// askExtProc plays Envoy on the ext_proc endpoint at target: the request headers of a discovery
// request whose apiserver answered, as a fake Envoy would claim.
func askExtProc(target string) codes.Code {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return codes.Internal
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return status.Code(err)
	}
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/apis")}, {Key: ":authority", RawValue: []byte("front")},
	}}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers, EndOfStream: true}}}); err != nil {
		_, err = stream.Recv()
		return status.Code(err)
	}
	_, err = stream.Recv()
	return status.Code(err)
}

func refusedConnections(t *testing.T, srv *Server, server, reason string) float64 {
	t.Helper()
	families, err := srv.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "skewgate_grpc_refused_connections_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "server") == server && label(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestExtProcAdmitsOnlyEnvoysUID: `skewgate serve` on its default kind of listener, a unix socket
// that file permissions leave open to everyone here. A fake Envoy running as another uid is refused
// before gRPC (so it cannot ask for merged documents by reporting an apiserver's answer); a client
// of skewgate's own uid is served.
func TestExtProcAdmitsOnlyEnvoysUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another uid; internal/grpcutil's TestPeerCredentials covers the check")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, _, _ := startServer(t, ctx, func(o *options.Options) {
		o.XDSListen, o.ExtProcListen = "unix://"+filepath.Join(dir, "xds.sock"), "unix://"+filepath.Join(dir, "extproc.sock")
		o.GRPCPlaintextLoopback = false
		o.Envoy.ExtProcAddress = ""
	})
	sock := filepath.Join(dir, "extproc.sock")
	if err := os.Chmod(sock, 0o777); err != nil { // only the peer check stands in the way
		t.Fatal(err)
	}

	if got := askExtProc("unix://" + sock); got != codes.OK {
		t.Fatalf("a client of skewgate's uid got %v, want an answer", got)
	}
	if got := testuid.RunAsNobody(t, dir, extprocDialEnv+"="+sock); got != codes.Unavailable.String() {
		t.Errorf("a fake Envoy as uid 65534 got %q, want Unavailable (refused before gRPC)", got)
	}
	if n := refusedConnections(t, srv, "extproc", "peer_uid"); n < 1 {
		t.Errorf("refused ext_proc connections (peer_uid) = %v, want at least 1", n)
	}
}
