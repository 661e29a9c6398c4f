package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child (etcd or an apiserver) with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, valid after done
}

// startProcess starts argv with its output appended to logPath. The child is killed if this process
// dies (Pdeathsig), and it leads its own process group so a kill reaches anything it forked.
func startProcess(name, logPath string, argv []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the whole process group and waits up to grace for the exit, then SIGKILLs.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
	return nil
}

// logTail returns the last n lines of the process log.
func (p *process) logTail(n int) string { return tailFile(p.logPath, n) }

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// exitError explains an early exit with the tail of the log and a hint for the usual causes.
func (p *process) exitError() error {
	tail := p.logTail(40)
	hint := ""
	switch {
	case strings.Contains(tail, "address already in use"):
		hint = " (its address is already in use by another process)"
	case strings.Contains(tail, "unshare failed"), strings.Contains(tail, "Operation not permitted"):
		hint = " (could not create a UTS namespace: run as root, or allow unprivileged user namespaces)"
	}
	return fmt.Errorf("%s exited before it was ready (%v)%s; last lines of %s:\n%s", p.name, p.err, hint, p.logPath, tail)
}

// registry remembers every live child so Close can reach them even after a failed Start.
type registry struct {
	mu    sync.Mutex
	procs map[*process]struct{}
}

func (r *registry) add(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs == nil {
		r.procs = map[*process]struct{}{}
	}
	r.procs[p] = struct{}{}
}

func (r *registry) remove(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, p)
}

func (r *registry) all() []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*process, 0, len(r.procs))
	for p := range r.procs {
		out = append(out, p)
	}
	return out
}
