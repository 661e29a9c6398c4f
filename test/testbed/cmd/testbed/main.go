// Command testbed runs the test control plane by hand: `testbed up` starts etcd and the default
// skewed apiservers and prints how to reach them; `testbed down` stops them.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbed up|down --dir DIR [--detach] [--peer-proxy]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".testbed/run", "working folder (certificates, data, logs, kubeconfigs)")
	detach := fs.Bool("detach", false, "up: run in the background and return once ready")
	peerProxy := fs.Bool("peer-proxy", false, "up: turn the in-tree Mixed Version Proxy on for every apiserver")
	withFront := fs.Bool("front", false, "up: also run skewgate and a data plane in front of the apiservers (Envoy if ENVOY_BIN is set, else the test data plane)")
	notifyFD := fs.Int("notify-fd", 0, "internal: file descriptor to report readiness on")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fatal(err)
	}
	switch os.Args[1] {
	case "up":
		if *detach {
			fatal(upDetached(abs, *peerProxy, *withFront))
			return
		}
		fatal(up(abs, *peerProxy, *withFront, *notifyFD))
	case "down":
		fatal(down(abs))
	default:
		fatal(fmt.Errorf("unknown command %q (want up or down)", os.Args[1]))
	}
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

func pidFile(dir string) string { return filepath.Join(dir, "testbed.pid") }

func up(dir string, peerProxy, withFront bool, notifyFD int) error {
	if pid, ok := running(dir); ok {
		return fmt.Errorf("already running as pid %d (testbed down --dir %s)", pid, dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if notifyFD > 0 {
		// The apiservers this process starts must not inherit the pipe, or the parent never sees EOF.
		syscall.CloseOnExec(notifyFD)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tb, err := testbed.Start(ctx, testbed.Config{Dir: dir, PeerProxy: peerProxy, Logf: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "testbed: "+f+"\n", a...)
	}})
	if err != nil {
		return err
	}
	defer tb.Close()
	if err := os.WriteFile(pidFile(dir), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(dir))
	desc := tb.Describe()
	if withFront {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		log, _ := zap.NewProduction()
		f, err := front.Start(fctx, tb, front.Options{Dir: filepath.Join(dir, "front"), Logger: log})
		cancel()
		if err != nil {
			return fmt.Errorf("front: %w", err)
		}
		defer f.Close()
		desc += describeFront(tb, f)
	}
	if notifyFD > 0 {
		f := os.NewFile(uintptr(notifyFD), "notify")
		fmt.Fprint(f, desc)
		f.Close()
	} else {
		fmt.Print(desc)
	}
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "testbed: stopping")
	return nil
}

// upDetached re-runs `up` in a new session with its output in dir/testbed.log and returns when the
// child reports ready (the description arrives over a pipe) or exits.
func upDetached(dir string, peerProxy, withFront bool) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	logPath := dir + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	args := []string{"up", "--dir", dir, "--notify-fd", "3"}
	if peerProxy {
		args = append(args, "--peer-proxy")
	}
	if withFront {
		args = append(args, "--front")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	desc, _ := bufio.NewReader(r).ReadString(0) // until the child closes its end
	if strings.TrimSpace(desc) == "" {
		_ = cmd.Wait()
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("did not start; %s:\n%s", logPath, log)
	}
	fmt.Printf("testbed running (pid %d, log %s)\n%s", cmd.Process.Pid, logPath, desc)
	return cmd.Process.Release()
}

// describeFront says how to use the front, with the three commands that show what it changes.
func describeFront(tb *testbed.Testbed, f *front.Front) string {
	kc := f.Kubeconfig(testbed.AdminByToken)
	s := fmt.Sprintf("\nfront  %s: skewgate with the %s (skewgate /metrics and /topology on http://%s)\n", f.URL, f.DataPlane, f.Server.HTTPAddr)
	if f.DataPlane != "envoy" {
		s += "       no Envoy binary here (set ENVOY_BIN to use one): the front is the test data plane, which follows Envoy's semantics for skewgate's config\n"
	}
	s += fmt.Sprintf("       kubeconfig %s\n\n", kc)
	s += "Try:\n"
	s += fmt.Sprintf("  kubectl --kubeconfig %s --context old get mutatingadmissionpolicies   # old apiserver alone: a wrong 404\n", tb.AdminTokenKubeconfig())
	s += fmt.Sprintf("  kubectl --kubeconfig %s get mutatingadmissionpolicies                 # through skewgate: served\n", kc)
	s += fmt.Sprintf("  kubectl --kubeconfig %s api-resources --api-group admissionregistration.k8s.io   # merged discovery\n", kc)
	s += fmt.Sprintf("  go run ./cmd/skewgate topology --server %s\n", f.Server.HTTPAddr)
	return s
}

func running(dir string) (int, bool) {
	data, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

func down(dir string) error {
	pid, ok := running(dir)
	if !ok {
		fmt.Println("testbed: not running")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return errors.New("did not stop within 60s; killed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("testbed: stopped")
	return nil
}
