package kubeadm

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// component is a control-plane component whose kubeconfig kubeadm writes with the local apiserver's
// URL (the advertise address: kubeadm's controller-manager.conf and scheduler.conf), and whose
// static pod reads it once, at start.
type component struct {
	kubeconfig, manifest string
}

// components are the ones ComponentsViaFront points at the node's front. The kubelet is not among
// them: it runs the front's own static pods, and its node lease and status stay independent of the
// front.
var components = []component{
	{kubeconfig: "controller-manager.conf", manifest: "kube-controller-manager.yaml"},
	{kubeconfig: "scheduler.conf", manifest: "kube-scheduler.yaml"},
}

// ServerAnnotation is set on a component's static pod to the server its kubeconfig names, whenever
// install changes that server: the kubelet restarts a static pod whose manifest changed, and the
// component reads its kubeconfig again.
const ServerAnnotation = "skewgate.io/apiserver-url"

// FrontURL is the node's front as a component on the node reaches it: the advertise address (a SAN of
// the node's apiserver.crt, which the front serves) and the front port.
func (o Options) FrontURL() string {
	host, _, _ := net.SplitHostPort(o.APIServerEndpoint)
	return "https://" + net.JoinHostPort(host, strconv.Itoa(o.FrontPort))
}

// LocalURL is the local apiserver's URL, as kubeadm writes it into the components' kubeconfigs.
func (o Options) LocalURL() string { return "https://" + o.APIServerEndpoint }

// renderComponents returns the kubeconfigs and static pods that change. With ComponentsViaFront,
// every cluster of each component's kubeconfig that names the local apiserver is pointed at the
// front; without it, one that names the front is pointed back at the local apiserver, and nothing
// else is touched (so a node that never had the option changes nothing). Credentials and every other
// field stay. A kubeconfig that names neither, or a missing one, is an error with the option, and
// left alone without it.
func renderComponents(o Options) ([]File, error) {
	want, other := o.LocalURL(), o.FrontURL()
	if o.ComponentsViaFront {
		want, other = other, want
	}
	if o.ComponentsViaFront {
		for _, name := range []string{"skewgate.yaml", "skewgate-envoy.yaml"} {
			if _, err := os.Stat(filepath.Join(o.ManifestsDir, name)); err != nil {
				return nil, fmt.Errorf("--components-via-front: the front is not installed on this node yet (%v): run install without it first, and again with it once the front serves", err)
			}
		}
	}
	var files []File
	for _, c := range components {
		kcPath := filepath.Join(o.KubeconfigDir, c.kubeconfig)
		data, err := os.ReadFile(kcPath)
		if errors.Is(err, fs.ErrNotExist) && !o.ComponentsViaFront {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("--components-via-front: %w", err)
		}
		cfg, err := clientcmd.Load(data)
		if err != nil {
			return nil, fmt.Errorf("--components-via-front: %s: %w", kcPath, err)
		}
		changed := false
		for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
			cl := cfg.Clusters[name]
			switch cl.Server {
			case want:
			case other:
				cl.Server, changed = want, true
			default:
				if o.ComponentsViaFront {
					return nil, fmt.Errorf("--components-via-front: %s: cluster %q names %q, neither the local apiserver %s nor the front %s; nothing changed",
						kcPath, name, cl.Server, o.LocalURL(), o.FrontURL())
				}
			}
		}
		mPath := filepath.Join(o.ManifestsDir, c.manifest)
		pod, annotated, err := readAnnotation(mPath)
		if err != nil {
			if !o.ComponentsViaFront && !changed {
				continue
			}
			return nil, fmt.Errorf("--components-via-front: %w", err)
		}
		if changed {
			out, err := clientcmd.Write(*cfg)
			if err != nil {
				return nil, err
			}
			files = append(files, File{Path: kcPath, Mode: 0o600, Data: out, Secret: true})
		}
		// A changed kubeconfig restarts its pod; with the option, a pod that lost the annotation (its
		// manifest was rewritten by kubeadm upgrade) gets it back, which restarts it once more.
		if changed || (o.ComponentsViaFront && annotated != want) {
			out, err := setAnnotation(pod, want)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mPath, err)
			}
			files = append(files, File{Path: mPath, Mode: 0o600, Data: out})
		}
	}
	return files, nil
}

// readAnnotation reads a static pod as a generic object (every field kept, known to this module's
// API types or not) and its ServerAnnotation.
func readAnnotation(path string) (map[string]any, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var pod map[string]any
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if pod["kind"] != "Pod" {
		return nil, "", fmt.Errorf("%s: not a Pod", path)
	}
	meta, _ := pod["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	v, _ := annotations[ServerAnnotation].(string)
	return pod, v, nil
}

func setAnnotation(pod map[string]any, value string) ([]byte, error) {
	meta, ok := pod["metadata"].(map[string]any)
	if !ok {
		return nil, errors.New("a Pod without metadata")
	}
	annotations, ok := meta["annotations"].(map[string]any)
	if !ok {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	annotations[ServerAnnotation] = value
	return yaml.Marshal(pod)
}
