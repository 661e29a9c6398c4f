package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// envoyRun is a node's real Envoy (ENVOY_BIN): the bootstrap `skewgate kubeadm install` renders for
// the co-located deployment (xDS over the node's unix socket, the admin API on a socket beside it,
// no hot restart), as a process of its own that stops and starts like the static pod.
type envoyRun struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// startEnvoy starts bin for node n; ready is closed (with *errp set on failure) once the front port
// accepts connections, which Envoy does only after its first listener arrived and warmed.
func (n *Node) startEnvoy(ctx context.Context, bin string, ready chan struct{}, errp *error) (*envoyRun, error) {
	cmd, logf, err := startEnvoyProcess(bin, n.o.Dir,
		envoyconf.BootstrapOptions{NodeID: "node-" + n.Name, NodeCluster: "skewgate-front", XDSAddress: "unix://" + n.xdsSock,
			Delta: n.envoyDelta(), AdminAddress: "unix://" + filepath.Join(n.o.Dir, "envoy-admin.sock")},
		"--disable-hot-restart")
	if err != nil {
		return nil, err
	}
	r := &envoyRun{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { cmd.Wait(); close(r.done) }()
	go func() {
		defer close(ready)
		for {
			if c, err := net.DialTimeout("tcp", n.Address, time.Second); err == nil {
				c.Close()
				return
			}
			select {
			case <-ctx.Done():
				*errp = fmt.Errorf("front: Envoy of node %s has no listener: %w", n.Name, ctx.Err())
				return
			case <-r.done:
				*errp = errors.New("front: Envoy of node " + n.Name + " exited; see " + logf.Name())
				return
			case <-time.After(20 * time.Millisecond): // polling the port: Envoy announces nothing
			}
		}
	}()
	return r, nil
}

func (r *envoyRun) stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	r.log.Close()
}

// kill ends Envoy by SIGKILL: no drain, every connection cut.
func (r *envoyRun) kill() {
	r.cmd.Process.Kill()
	<-r.done
	r.log.Close()
}

// startEnvoyProcess writes the bootstrap bo renders to dir/envoy.yaml and starts bin on it with
// args, its output appended to dir/envoy.log (a restarted Envoy keeps the earlier lines).
func startEnvoyProcess(bin, dir string, bo envoyconf.BootstrapOptions, args ...string) (*exec.Cmd, *os.File, error) {
	b, err := envoyconf.Bootstrap(bo)
	if err != nil {
		return nil, nil, err
	}
	y, err := envoyconf.BootstrapYAML(b)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		return nil, nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "envoy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, append([]string{"-c", path, "--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	return cmd, logf, nil
}

// envoyDelta is whether Envoy speaks delta ADS: unless NodeOptions.XDSProtocol or
// $SKEWGATE_DATAPLANE_XDS says state of the world.
func (n *Node) envoyDelta() bool {
	p := n.o.XDSProtocol
	if p == "" {
		p = dataplane.Protocol(os.Getenv(XDSProtocolEnv))
	}
	return p != dataplane.SotW
}
