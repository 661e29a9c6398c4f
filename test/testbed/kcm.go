package testbed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManagerUser is the user kube-controller-manager authenticates as, the common name of the
// client certificate kubeadm writes into controller-manager.conf; the bootstrap ClusterRole
// system:kube-controller-manager is bound to it.
const ControllerManagerUser = "system:kube-controller-manager"

// ControllerManagerOptions describe the real kube-controller-manager StartControllerManager runs.
type ControllerManagerOptions struct {
	// Version names the binary kube-controller-manager-<Version>; default OldVersion (the one a node
	// that is not upgraded yet runs beside its apiserver).
	Version string
	// Server is the URL in its kubeconfig: an apiserver's (Apiserver.URL) or a front's. Its
	// certificate must be valid for ServingSNI and signed by the testbed CA. Required.
	Server string
	// Name tells several runs apart (log and kubeconfig names); default "kcm".
	Name string
	// Controllers is --controllers; default the namespace controller and the garbage collector.
	Controllers string
}

// ControllerManager is a running kube-controller-manager.
type ControllerManager struct {
	Name    string
	LogPath string
	proc    *process
	tb      *Testbed
}

// StartControllerManager runs kube-controller-manager as kubeadm does, on its own certificate
// (system:kube-controller-manager) with --use-service-account-credentials, so each controller acts
// as its own service account (the namespace controller as system:serviceaccount:kube-system:
// namespace-controller), and returns once it is running. There is no leader election (one runs at a
// time) and no serving port.
func (tb *Testbed) StartControllerManager(ctx context.Context, o ControllerManagerOptions) (*ControllerManager, error) {
	if o.Server == "" {
		return nil, errors.New("testbed: ControllerManagerOptions.Server is required")
	}
	if o.Version == "" {
		o.Version = OldVersion
	}
	if o.Name == "" {
		o.Name = "kcm"
	}
	if o.Controllers == "" {
		o.Controllers = "namespace,garbagecollector"
	}
	bin := "kube-controller-manager-" + o.Version
	if err := checkBinary(tb.cfg.BinDir, bin); err != nil {
		return nil, err
	}
	pair, err := tb.PKI.IssueClient(tb.PKI.ca, o.Name, ControllerManagerUser)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(tb.cfg.Dir, o.Name+".kubeconfig")
	if err := tb.writeKubeconfig(kubeconfig, &clientcmdapi.AuthInfo{ClientCertificate: pair.Cert, ClientKey: pair.Key},
		map[string]string{o.Name: o.Server}, o.Name); err != nil {
		return nil, err
	}
	argv := []string{
		filepath.Join(tb.cfg.BinDir, bin),
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + o.Controllers,
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--secure-port=0",
		"--v=2",
	}
	logPath := filepath.Join(tb.cfg.Dir, "logs", o.Name+".log")
	p, err := startProcess(o.Name+" "+o.Version, logPath, argv)
	if err != nil {
		return nil, err
	}
	tb.children.add(p)
	tb.cfg.Logf("kube-controller-manager %s (%s, --controllers=%s) pid %d, kubeconfig server %s", o.Name, o.Version, o.Controllers, p.pid(), o.Server)
	return &ControllerManager{Name: o.Name, LogPath: logPath, proc: p, tb: tb}, nil
}

// Exited reports why kube-controller-manager ended, or nil while it runs.
func (cm *ControllerManager) Exited() error {
	if !cm.proc.exited() {
		return nil
	}
	return fmt.Errorf("%s: %w", cm.Name, cm.proc.exitError())
}

// Stop ends kube-controller-manager.
func (cm *ControllerManager) Stop() {
	_ = cm.proc.stop(syscall.SIGTERM, 10*time.Second)
	cm.tb.children.remove(cm.proc)
}

// LogTail returns the last n lines of its log.
func (cm *ControllerManager) LogTail(n int) string { return tailFile(cm.LogPath, n) }
