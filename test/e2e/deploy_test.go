package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/kubeadm"
	"github.com/skewgate/skewgate/test/testbed"
)

// deploy/ holds no manifest of skewgate any more: `skewgate kubeadm install` renders the static pods,
// the Envoy bootstrap, skewgate's credential and the RBAC on each control-plane node.

// TestDeployManifests installs on every testbed apiserver's "node" and passes each node's static pods
// through a server-side dry run as Pods in kube-system: schema, defaults and admission of the real
// server (the priority class included).
func TestDeployManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the testbed")
	}
	tb := testbed.StartT(t, testbed.Config{})
	admin := tb.AdminTokenKubeconfig()
	// The testbed has no controller-manager to create kube-system/default, which every cluster has.
	mustKubectl(t, admin, "create", "serviceaccount", "default", "-n", "kube-system")
	for _, a := range tb.Apiservers() {
		o := installOn(t, tb, a)
		for _, m := range []string{"skewgate.yaml", "skewgate-envoy.yaml"} {
			out := mustKubectl(t, admin, "apply", "--dry-run=server", "-o", "yaml", "-f", filepath.Join(o.ManifestsDir, m))
			var pod corev1.Pod
			if err := yaml.Unmarshal([]byte(out), &pod); err != nil {
				t.Fatal(err)
			}
			// Admission resolved the class to the number the kubelet uses for a static pod.
			if pod.Namespace != "kube-system" || pod.Spec.Priority == nil || *pod.Spec.Priority != 2000001000 || !pod.Spec.HostNetwork {
				t.Errorf("%s of %s after the dry run: namespace %q priority %v hostNetwork %v", m, a.Name, pod.Namespace, pod.Spec.Priority, pod.Spec.HostNetwork)
			}
		}
		// Each node's skewgate reads its own apiserver, which is also its static upstream.
		args := serveArgs(t, filepath.Join(o.ManifestsDir, "skewgate.yaml"))
		if got, want := args["--static-upstream"], []string{a.Name + "=" + a.Address()}; len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s: --static-upstream %v, want %v", a.Name, got, want)
		}
	}
}

// installOn runs the install on a kubeadm-like node of apiserver a (the endpoint comes from its
// kube-apiserver manifest, as on a real node) and returns the options it ran with.
func installOn(t *testing.T, tb *testbed.Testbed, a testbed.Apiserver, allowedCIDRs ...string) kubeadm.Options {
	t.Helper()
	root := kubeadmNode(t, tb, a)
	o := kubeadm.Options{
		NodeName: a.Name, PKIDir: filepath.Join(root, "pki"), ManifestsDir: filepath.Join(root, "manifests"),
		ConfigDir: filepath.Join(root, "skewgate"), SocketDir: filepath.Join(root, "sockets"), AllowedCIDRs: allowedCIDRs,
		SkewgateImage: kubeadm.SkewgateImage("v0.9.0"),
	}.WithDefaults()
	o, err := o.DetectNode()
	if err != nil {
		t.Fatal(err)
	}
	if o.APIServerEndpoint != a.Address() {
		t.Fatalf("endpoint from the kube-apiserver manifest %q, want %q", o.APIServerEndpoint, a.Address())
	}
	plan, err := kubeadm.Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeadm.Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}
	return o
}

// kubeadmNode lays out the testbed as the kubeadm control-plane node of apiserver a: its PKI under
// kubeadm's file names (the testbed's cluster CA, a's serving certificate, the front-proxy CA and client)
// and a kube-apiserver static pod carrying kubeadm's advertise-address annotation.
func kubeadmNode(t *testing.T, tb *testbed.Testbed, a testbed.Apiserver) (root string) {
	t.Helper()
	root = t.TempDir()
	pki, manifests := filepath.Join(root, "pki"), filepath.Join(root, "manifests")
	for _, d := range []string{pki, manifests} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for dst, src := range map[string]string{
		"ca.crt": tb.PKI.CA.Cert, "ca.key": tb.PKI.CA.Key,
		"apiserver.crt": a.Serving.Cert, "apiserver.key": a.Serving.Key,
		"front-proxy-client.crt": tb.PKI.FrontProxyClient.Cert, "front-proxy-client.key": tb.PKI.FrontProxyClient.Key,
		"front-proxy-ca.crt": tb.PKI.FrontProxyCA.Cert,
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pki, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	apiserverPod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n  annotations:\n" +
		"    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: " + a.Address() + "\n" +
		"spec:\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:" + a.Version + "\n"
	if err := os.WriteFile(filepath.Join(manifests, "kube-apiserver.yaml"), []byte(apiserverPod), 0o600); err != nil {
		t.Fatal(err)
	}
	return root
}

// serveArgs returns the values of each --flag=value in the skewgate static pod's arguments.
func serveArgs(t *testing.T, manifest string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, a := range pod.Spec.Containers[0].Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		out[k] = append(out[k], v)
	}
	return out
}
