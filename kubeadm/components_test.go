package kubeadm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeadmComponents writes what kubeadm leaves on a control-plane node for the controller-manager
// and the scheduler: a kubeconfig naming the local apiserver with the component's own client
// certificate embedded, and a static pod. It returns the kubeconfigs' bytes by file name.
func kubeadmComponents(t *testing.T, n *node, server string) map[string][]byte {
	t.Helper()
	o := n.options()
	if err := os.MkdirAll(o.KubeconfigDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(o.ManifestsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, c := range components {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("ca of " + c.kubeconfig)}
		user := "system:" + strings.TrimSuffix(c.kubeconfig, ".conf")
		cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert of " + user), ClientKeyData: []byte("key of " + user)}
		cfg.Contexts[user+"@kubernetes"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: user}
		cfg.CurrentContext = user + "@kubernetes"
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(o.KubeconfigDir, c.kubeconfig), data)
		out[c.kubeconfig] = data
		pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + strings.TrimSuffix(c.manifest, ".yaml") +
			"\n  namespace: kube-system\n  labels:\n    tier: control-plane\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: registry.k8s.io/c:v1.36.3\n    futureField: kept\n"
		writeFile(t, filepath.Join(o.ManifestsDir, c.manifest), []byte(pod))
	}
	return out
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// install renders and applies o and returns the paths it changed.
func install(t *testing.T, o Options) []string {
	t.Helper()
	plan, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Apply(plan, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, c := range changes {
		if c.Action != "unchanged" {
			changed = append(changed, c.Path)
		}
	}
	return changed
}

// componentState reads a component's kubeconfig server and its pod's annotation.
func componentState(t *testing.T, o Options, c component) (server, annotation string, cfg *clientcmdapi.Config) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(filepath.Join(o.KubeconfigDir, c.kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	_, annotation, err = readAnnotation(filepath.Join(o.ManifestsDir, c.manifest))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Clusters["kubernetes"].Server, annotation, cfg
}

func TestComponentsViaFrontOnAndOff(t *testing.T) {
	n := installed(t)
	o := n.options()
	kubeadmComponents(t, n, "https://10.0.0.11:6443")
	if changed := install(t, o); len(changed) != 0 {
		t.Fatalf("without the option a node that never had it changed %v", changed)
	}

	o.ComponentsViaFront = true
	changed := install(t, o)
	if len(changed) != 2*len(components) {
		t.Errorf("turning it on changed %v; want each component's kubeconfig and pod", changed)
	}
	for _, c := range components {
		server, annotation, cfg := componentState(t, o, c)
		if server != "https://10.0.0.11:16443" || annotation != server {
			t.Errorf("%s: server %q, pod annotation %q; want both the front https://10.0.0.11:16443", c.kubeconfig, server, annotation)
		}
		user := "system:" + strings.TrimSuffix(c.kubeconfig, ".conf")
		if ai := cfg.AuthInfos[user]; ai == nil || string(ai.ClientKeyData) != "key of "+user || cfg.CurrentContext != user+"@kubernetes" {
			t.Errorf("%s: the credentials or context changed: %+v", c.kubeconfig, cfg)
		}
		data, _ := os.ReadFile(filepath.Join(o.ManifestsDir, c.manifest))
		if !strings.Contains(string(data), "futureField: kept") || !strings.Contains(string(data), "tier: control-plane") {
			t.Errorf("%s lost fields:\n%s", c.manifest, data)
		}
	}
	if changed := install(t, o); len(changed) != 0 {
		t.Errorf("a second run with the option changed %v", changed)
	}

	// kubeadm upgrade rewrites the manifests (the annotation is gone) and keeps the server: one
	// restart brings the annotation back, the kubeconfig stays.
	kcm := filepath.Join(o.ManifestsDir, components[0].manifest)
	writeFile(t, kcm, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-controller-manager\nspec:\n  containers: []\n"))
	if changed := install(t, o); len(changed) != 1 || changed[0] != kcm {
		t.Errorf("after a rewritten manifest: changed %v, want only %s", changed, kcm)
	}

	o.ComponentsViaFront = false
	if changed := install(t, o); len(changed) != 2*len(components) {
		t.Errorf("turning it off changed %v; want each kubeconfig and pod", changed)
	}
	for _, c := range components {
		if server, annotation, _ := componentState(t, o, c); server != "https://10.0.0.11:6443" || annotation != server {
			t.Errorf("%s: server %q, annotation %q after turning it off; want the local apiserver", c.kubeconfig, server, annotation)
		}
	}
	if changed := install(t, o); len(changed) != 0 {
		t.Errorf("a second run without the option changed %v", changed)
	}
}

func TestComponentsViaFrontRefuses(t *testing.T) {
	t.Run("front not installed", func(t *testing.T) {
		n := newNode(t)
		o := n.options()
		kubeadmComponents(t, n, "https://10.0.0.11:6443")
		o.ComponentsViaFront = true
		if _, err := Render(o); err == nil || !strings.Contains(err.Error(), "not installed on this node yet") {
			t.Errorf("got %v; want the front installed first", err)
		}
	})
	t.Run("foreign server", func(t *testing.T) {
		n := installed(t)
		o := n.options()
		before := kubeadmComponents(t, n, "https://lb.example:6443")
		o.ComponentsViaFront = true
		if _, err := Render(o); err == nil || !strings.Contains(err.Error(), `names "https://lb.example:6443", neither the local apiserver`) {
			t.Errorf("got %v; want the foreign server named", err)
		}
		// Without the option a foreign server is none of skewgate's business.
		o.ComponentsViaFront = false
		if changed := install(t, o); len(changed) != 0 {
			t.Errorf("without the option a foreign server was changed: %v", changed)
		}
		for name, data := range before {
			if got, _ := os.ReadFile(filepath.Join(o.KubeconfigDir, name)); string(got) != string(data) {
				t.Errorf("%s changed", name)
			}
		}
	})
	t.Run("missing kubeconfig", func(t *testing.T) {
		n := installed(t)
		o := n.options()
		o.ComponentsViaFront = true
		if _, err := Render(o); err == nil || !strings.Contains(err.Error(), "controller-manager.conf") {
			t.Errorf("got %v; want the missing kubeconfig named", err)
		}
	})
	t.Run("not a pod", func(t *testing.T) {
		n := installed(t)
		o := n.options()
		kubeadmComponents(t, n, "https://10.0.0.11:6443")
		writeFile(t, filepath.Join(o.ManifestsDir, components[1].manifest), []byte("kind: ConfigMap\n"))
		o.ComponentsViaFront = true
		if _, err := Render(o); err == nil || !strings.Contains(err.Error(), "not a Pod") {
			t.Errorf("got %v; want the manifest refused", err)
		}
	})
}
