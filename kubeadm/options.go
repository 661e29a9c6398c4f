package kubeadm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Options describe the node and where everything goes. Paths are on the node; the static pods mount
// them at the same paths, so every path the containers are given is valid on the host as well.
type Options struct {
	// NodeName names the local apiserver as a static upstream (it must equal the hostname label of
	// that apiserver's identity Lease) and is Envoy's node id.
	NodeName string
	// APIServerEndpoint is the local apiserver, ip:port (kubeadm's advertise address and bind port).
	APIServerEndpoint string
	// PKIDir is kubeadm's certificate directory [/etc/kubernetes/pki].
	PKIDir string
	// ManifestsDir is the kubelet's static pod directory [/etc/kubernetes/manifests].
	ManifestsDir string
	// ConfigDir receives skewgate's kubeconfig, client certificate, Envoy's bootstrap and the RBAC
	// [/etc/skewgate].
	ConfigDir string
	// SocketDir holds the xDS and ext_proc unix sockets; created 0700 [/var/lib/skewgate]. It is on
	// a persistent file system on purpose: the pods mount it as an existing Directory, and a tmpfs
	// directory would be gone after a reboot (a kubelet-created one would be 0755).
	SocketDir string
	// FrontPort is where Envoy serves the front, beside the apiserver's own port [16443].
	FrontPort int
	// HTTPListen is skewgate's health and metrics address; loopback [127.0.0.1:18080].
	HTTPListen string
	// AllowedCIDRs are passed to skewgate serve --allowed-cidr.
	AllowedCIDRs []string
	// KubeconfigDir holds kubeadm's kubeconfigs of the control-plane components [/etc/kubernetes].
	KubeconfigDir string
	// ComponentsViaFront points the controller-manager's and the scheduler's kubeconfigs at the node's
	// front (FrontURL) and restarts their static pods; without it, kubeconfigs that name the front are
	// pointed back at the local apiserver (renderComponents).
	ComponentsViaFront bool
	// ForwardCertificateUID renders skewgate serve --forward-certificate-uid: every apiserver reads
	// X-Remote-Uid (--requestheader-uid-headers), which kubeadm does not set by itself.
	ForwardCertificateUID bool
	// KubernetesEndpoints renders skewgate serve --kubernetes-endpoints (the node's front, at the
	// local apiserver's advertise address and --front-port, in the kubernetes Service) and the RBAC
	// it needs. Rendering without it again takes the node out: the old skewgate removes itself as it
	// stops (docs/kubernetes-service.md).
	KubernetesEndpoints bool
	// SkewgateImage is skewgate's container image, required: the command's own release
	// (SkewgateImage(version)) unless told otherwise. EnvoyImage defaults to DefaultEnvoyImage.
	SkewgateImage, EnvoyImage string
	// Now is the clock for certificate validity [time.Now].
	Now func() time.Time
}

// Defaults for Options.
const (
	DefaultPKIDir        = "/etc/kubernetes/pki"
	DefaultManifestsDir  = "/etc/kubernetes/manifests"
	DefaultConfigDir     = "/etc/skewgate"
	DefaultKubeconfigDir = "/etc/kubernetes"
	DefaultSocketDir     = "/var/lib/skewgate"
	DefaultFrontPort     = 16443
	DefaultHTTPListen    = "127.0.0.1:18080"
	DefaultEnvoyImage    = "envoyproxy/envoy:v1.40.0"
	// SkewgateRepository is where `make image` pushes, tagged with the release.
	SkewgateRepository = "ghcr.io/skewgate/skewgate"
)

// SkewgateImage is the image of skewgate release version.
func SkewgateImage(version string) string { return SkewgateRepository + ":" + version }

// WithDefaults fills unset fields, except NodeName and APIServerEndpoint (see DetectNode) and
// SkewgateImage.
func (o Options) WithDefaults() Options {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&o.PKIDir, DefaultPKIDir)
	def(&o.ManifestsDir, DefaultManifestsDir)
	def(&o.ConfigDir, DefaultConfigDir)
	def(&o.KubeconfigDir, DefaultKubeconfigDir)
	def(&o.SocketDir, DefaultSocketDir)
	def(&o.HTTPListen, DefaultHTTPListen)
	def(&o.EnvoyImage, DefaultEnvoyImage)
	if o.FrontPort == 0 {
		o.FrontPort = DefaultFrontPort
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports every problem with o, naming the flag.
func (o Options) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.NodeName); o.NodeName == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--node-name %q: must be the node's lowercase hostname (%s)", o.NodeName, strings.Join(msgs, "; ")))
	}
	if host, port, err := net.SplitHostPort(o.APIServerEndpoint); err != nil || net.ParseIP(host) == nil {
		errs = append(errs, fmt.Errorf("--apiserver-endpoint %q: want ip:port of the local apiserver", o.APIServerEndpoint))
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		errs = append(errs, fmt.Errorf("--apiserver-endpoint %q: bad port", o.APIServerEndpoint))
	} else if p == o.FrontPort {
		errs = append(errs, fmt.Errorf("--front-port %d is the apiserver's own port", o.FrontPort))
	}
	if o.FrontPort < 1024 || o.FrontPort > 65535 {
		// The Envoy container has no capability at all, NET_BIND_SERVICE included.
		errs = append(errs, fmt.Errorf("--front-port %d: out of range [1024, 65535] (Envoy runs without capabilities)", o.FrontPort))
	}
	if _, port, err := net.SplitHostPort(o.HTTPListen); err == nil && port == strconv.Itoa(o.FrontPort) {
		errs = append(errs, fmt.Errorf("--front-port %d is also --http-listen's port", o.FrontPort))
	}
	for flag, dir := range map[string]string{"--pki-dir": o.PKIDir, "--manifests-dir": o.ManifestsDir, "--config-dir": o.ConfigDir, "--socket-dir": o.SocketDir, "--kubeconfig-dir": o.KubeconfigDir} {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			errs = append(errs, fmt.Errorf("%s %q: want a clean absolute path (the pods mount it at the same path)", flag, dir))
		}
	}
	for flag, dir := range map[string]string{"--config-dir": o.ConfigDir, "--socket-dir": o.SocketDir} {
		if rel, err := filepath.Rel(o.ManifestsDir, dir); err == nil && !strings.HasPrefix(rel, "..") {
			errs = append(errs, fmt.Errorf("%s %q is inside --manifests-dir %q: the kubelet would read its files as pods", flag, dir, o.ManifestsDir))
		}
	}
	if len(o.SocketDir)+len("/extproc.sock") > 100 {
		errs = append(errs, fmt.Errorf("--socket-dir %q: too long for a unix socket path (108 bytes)", o.SocketDir))
	}
	if host, _, err := net.SplitHostPort(o.HTTPListen); err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
		errs = append(errs, fmt.Errorf("--http-listen %q: want a loopback ip:port (metrics and the Topology stay on the node)", o.HTTPListen))
	}
	if o.KubernetesEndpoints && len(o.AllowedCIDRs) == 0 {
		// Once skewgate writes the kubernetes EndpointSlice, discovery no longer trusts it
		// (--trust-endpointslice skips skewgate's own slice), and the only static upstream is the
		// local apiserver: without a CIDR the other apiservers, and so the other fronts, are refused.
		errs = append(errs, errors.New("--kubernetes-endpoints needs --allowed-cidr covering the control-plane nodes: the kubernetes EndpointSlice then lists fronts and no longer vouches for the other apiservers' addresses"))
	}
	for flag, img := range map[string]string{"--skewgate-image": o.SkewgateImage, "--envoy-image": o.EnvoyImage} {
		if img == "" {
			errs = append(errs, fmt.Errorf("%s is required", flag))
		} else if strings.ContainsAny(img, " \t\n") {
			errs = append(errs, fmt.Errorf("%s %q: want an image reference", flag, img))
		}
	}
	return errors.Join(errs...)
}

// kubeadm writes the local endpoint of its apiserver into this annotation of the kube-apiserver
// static pod (cmd/kubeadm/app/constants, KubeAPIServerAdvertiseAddressEndpointAnnotationKey).
const advertiseAnnotation = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"

// DetectNode fills NodeName from the host name and APIServerEndpoint from the kube-apiserver static
// pod in ManifestsDir, where they are unset.
func (o Options) DetectNode() (Options, error) {
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("--node-name: %w", err)
		}
		o.NodeName = strings.ToLower(h)
	}
	if o.APIServerEndpoint != "" {
		return o, nil
	}
	path := filepath.Join(o.ManifestsDir, "kube-apiserver.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return o, fmt.Errorf("--apiserver-endpoint not given and the kube-apiserver manifest is unreadable: %w", err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return o, fmt.Errorf("%s: %w", path, err)
	}
	if ep := pod.Annotations[advertiseAnnotation]; ep != "" {
		o.APIServerEndpoint = ep
		return o, nil
	}
	addr, port := "", "6443"
	for _, c := range pod.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if v, ok := strings.CutPrefix(a, "--advertise-address="); ok {
				addr = v
			}
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				port = v
			}
		}
	}
	if addr == "" {
		return o, fmt.Errorf("%s: no %s annotation and no --advertise-address; give --apiserver-endpoint", path, advertiseAnnotation)
	}
	o.APIServerEndpoint = net.JoinHostPort(addr, port)
	return o, nil
}
