package front

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve"
)

// Skewgate is one `skewgate serve` process of a front or a node: the built binary (skewgateBinary),
// a process of its own, started with the flags a deployment gives it and stopped by a signal, so
// that a restart is a new process with a cold runtime and nothing shared with the test or with
// another node. The test reads it only from the outside, as an operator does: /readyz, /metrics and
// /topology on its --http-listen.
type Skewgate struct {
	// PID is the process id.
	PID int
	// XDSAddr, ExtProcAddr and HTTPAddr are what it listens on, from its "serving" log line.
	XDSAddr, ExtProcAddr, HTTPAddr string
	// Registry reads its metrics: every Gather scrapes /metrics.
	Registry prometheus.Gatherer
	// Discovery reads its Topology from /topology.
	Discovery *TopologyReader

	name    string
	cmd     *exec.Cmd
	client  *http.Client
	exited  chan struct{} // closed once the process was reaped
	waitErr error         // what cmd.Wait returned
	tail    *lineTail
}

// How long a skewgate process has to log "serving" after its start, and to exit after SIGTERM (its
// gRPC servers drain for at most 10 s, its HTTP server for 5 s).
const (
	skewgateStartTimeout = time.Minute
	skewgateStopTimeout  = 30 * time.Second
)

// startSkewgate runs the skewgate binary with args (after "serve") and returns once it logged
// "serving": its listeners are open, whether or not it has a Topology yet. Its stderr goes, line by
// line, to logf (the test log, shown when a test fails or with -v) and to logPath.
func startSkewgate(name, logPath string, args []string, logf func(string, ...any)) (*Skewgate, error) {
	bin, err := skewgateBinary()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Stdout = logFile
	// A race-enabled binary otherwise sleeps 1 s at exit (to let other threads report), which would
	// count as shutdown time.
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// Its own process group (a ^C to the test does not reach it first), and killed with the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("front: skewgate of %s: %w", name, err)
	}
	s := &Skewgate{PID: cmd.Process.Pid, name: name, cmd: cmd, exited: make(chan struct{}), tail: &lineTail{max: 40},
		client: &http.Client{Timeout: 5 * time.Second}}
	serving := make(chan servingLine, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			s.tail.add(line)
			logf("skewgate %s [pid %d]: %s", name, s.PID, line)
			var l servingLine
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving" {
				select {
				case serving <- l:
				default:
				}
			}
		}
		// Every read of the pipe is done: only now may Wait close it.
		s.waitErr = cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	select {
	case l := <-serving:
		s.XDSAddr, s.ExtProcAddr, s.HTTPAddr = l.XDS, l.ExtProc, l.HTTP
	case <-s.exited:
		return nil, fmt.Errorf("front: skewgate of %s exited before it served (%v); its last lines:\n%s", name, s.waitErr, s.tail)
	case <-time.After(skewgateStartTimeout):
		cmd.Process.Kill()
		<-s.exited
		return nil, fmt.Errorf("front: skewgate of %s did not log \"serving\" within %v of its start; its last lines:\n%s", name, skewgateStartTimeout, s.tail)
	}
	s.Registry = scrape{s}
	s.Discovery = &TopologyReader{s}
	return s, nil
}

// servingLine is the log line skewgate writes once its listeners are open (internal/serve.Start).
type servingLine struct {
	Msg     string `json:"msg"`
	XDS     string `json:"xds"`
	ExtProc string `json:"extproc"`
	HTTP    string `json:"http"`
}

// Stop sends SIGTERM and waits until the process exited; it returns nil when it exited 0, as
// `skewgate serve` does after a clean shutdown, else its exit status and last log lines. A process
// that is still there after skewgateStopTimeout is killed, and that is an error too.
func (s *Skewgate) Stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("front: SIGTERM to skewgate of %s: %w", s.name, err)
	}
	select {
	case <-s.exited:
	case <-time.After(skewgateStopTimeout):
		s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("front: skewgate of %s did not exit within %v of SIGTERM; its last lines:\n%s", s.name, skewgateStopTimeout, s.tail)
	}
	if s.waitErr != nil {
		return fmt.Errorf("front: skewgate of %s ended with %w; its last lines:\n%s", s.name, s.waitErr, s.tail)
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is gone: no shutdown of any kind, its sockets
// left behind. It returns an error unless the process died of that signal (one that had exited on
// its own before is an error as well).
func (s *Skewgate) Kill() error {
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("front: SIGKILL to skewgate of %s: %w", s.name, err)
	}
	<-s.exited
	var ee *exec.ExitError
	if errors.As(s.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("front: skewgate of %s did not die of SIGKILL: %v; its last lines:\n%s", s.name, s.waitErr, s.tail)
}

// Exited is closed once the process has exited, for whatever reason.
func (s *Skewgate) Exited() <-chan struct{} { return s.exited }

// Ready reports whether its /readyz answers 200: its first Topology is published.
func (s *Skewgate) Ready() bool {
	resp, err := s.client.Get("http://" + s.HTTPAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady polls /readyz until it answers 200; it fails when ctx ends or the process exits first.
func (s *Skewgate) WaitReady(ctx context.Context) error {
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("front: skewgate of %s has no Topology: %w", s.name, ctx.Err())
		case <-s.exited:
			return fmt.Errorf("front: skewgate of %s exited (%v) before it had a Topology; its last lines:\n%s", s.name, s.waitErr, s.tail)
		case <-time.After(20 * time.Millisecond): // polling /readyz: skewgate announces nothing
		}
	}
	return nil
}

// Topology is the document skewgate serves on /topology.
type Topology struct{ serve.TopologyView }

// Upstream finds an upstream by name, proven or not (discovery.Topology.Upstream).
func (t *Topology) Upstream(name string) (discovery.Upstream, bool) {
	for _, us := range [][]discovery.Upstream{t.Upstreams, t.Unproven} {
		for _, u := range us {
			if u.Name == name {
				return u, true
			}
		}
	}
	return discovery.Upstream{}, false
}

// TopologyReader reads a skewgate's /topology.
type TopologyReader struct{ s *Skewgate }

// Current is skewgate's Topology, nil while it has none (503) or does not answer.
func (r *TopologyReader) Current() *Topology {
	resp, err := r.s.client.Get("http://" + r.s.HTTPAddr + "/topology")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var t Topology
	if err := json.NewDecoder(resp.Body).Decode(&t.TopologyView); err != nil {
		return nil
	}
	return &t
}

// scrape is a prometheus.Gatherer over a skewgate's /metrics.
type scrape struct{ s *Skewgate }

func (g scrape) Gather() ([]*dto.MetricFamily, error) {
	resp, err := g.s.client.Get("http://" + g.s.HTTPAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("front: skewgate of %s: /metrics: %s", g.s.name, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("front: skewgate of %s: /metrics: %w", g.s.name, err)
	}
	out := make([]*dto.MetricFamily, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	return out, nil
}

// lineTail keeps the last max lines of a process's log, for error messages.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, l)
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
