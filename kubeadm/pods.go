package kubeadm

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The value of the system-node-critical PriorityClass; kubeadm sets both on its static pods, and the
// kubelet reads the number (it cannot look the class up without an apiserver).
const nodeCriticalPriority int32 = 2000001000

// certHashAnnotation carries the hash of skewgate's client certificate and of the CA it verifies the
// apiservers with: a renewed certificate or a rotated CA changes the manifest, so the kubelet
// restarts skewgate with them.
const certHashAnnotation = "skewgate/client-certificate-sha256"

// paths are where everything lives on the node (and, mounted at the same path, in the containers).
// Each pod mounts one directory of its own and the socket directory: skewgate sees its credential
// and the CA certificate, Envoy its bootstrap and copies of the four node files it serves with, and
// neither sees the other's keys or the node's PKI directory (the CA keys, the service-account key).
type paths struct {
	skewgateDir, kubeconfig, certFile, keyFile, skewgateCA                     string
	envoyDir, bootstrap, envoyCA, servingCert, servingKey, proxyCert, proxyKey string
	xdsSocket, extprocSocket, adminSocket                                      string
}

func (o Options) paths() paths {
	sg := func(f string) string { return filepath.Join(o.ConfigDir, "skewgate", f) }
	envoy := func(f string) string { return filepath.Join(o.ConfigDir, "envoy", f) }
	return paths{
		skewgateDir: sg(""), kubeconfig: sg("kubeconfig"), certFile: sg("skewgate.crt"), keyFile: sg("skewgate.key"), skewgateCA: sg("ca.crt"),
		envoyDir: envoy(""), bootstrap: envoy("bootstrap.yaml"), envoyCA: envoy("ca.crt"),
		servingCert: envoy("apiserver.crt"), servingKey: envoy("apiserver.key"),
		proxyCert: envoy("front-proxy-client.crt"), proxyKey: envoy("front-proxy-client.key"),
		xdsSocket:     "unix://" + filepath.Join(o.SocketDir, "xds.sock"),
		extprocSocket: "unix://" + filepath.Join(o.SocketDir, "extproc.sock"),
		adminSocket:   "unix://" + filepath.Join(o.SocketDir, "envoy-admin.sock"),
	}
}

// ServeArgs are the arguments of `skewgate serve` in the skewgate static pod.
func (o Options) ServeArgs() []string {
	p := o.paths()
	args := []string{"serve",
		"--kubeconfig=" + p.kubeconfig,
		// The local apiserver is routable as soon as it is ready, before any Lease is read.
		"--static-upstream=" + o.NodeName + "=" + o.APIServerEndpoint,
	}
	for _, c := range o.AllowedCIDRs {
		args = append(args, "--allowed-cidr="+c)
	}
	if o.ForwardCertificateUID {
		args = append(args, "--forward-certificate-uid")
	}
	if o.KubernetesEndpoints {
		// Pods reach the front at the node's advertise address, the one the apiserver published.
		host, _, _ := net.SplitHostPort(o.APIServerEndpoint)
		args = append(args, "--kubernetes-endpoints", "--kubernetes-endpoint-address="+host, "--kubernetes-endpoints-member="+o.NodeName)
		// Another node's front is on its apiserver's address, which discovery knows only from an
		// address annotation on its identity Lease (apiservers before 1.36 write none): the
		// control-plane range admits it as that apiserver's member then.
		for _, c := range o.AllowedCIDRs {
			args = append(args, "--kubernetes-endpoints-cidr="+c)
		}
	}
	return append(args,
		"--xds-listen="+p.xdsSocket,
		"--extproc-listen="+p.extprocSocket,
		"--http-listen="+o.HTTPListen,
		"--front-address="+o.frontAddress(),
		"--front-port="+strconv.Itoa(o.FrontPort),
		"--front-cert-file="+p.servingCert,
		"--front-key-file="+p.servingKey,
		"--front-client-ca-file="+p.envoyCA,
		"--envoy-upstream-ca-file="+p.envoyCA,
		"--front-proxy-cert-file="+p.proxyCert,
		"--front-proxy-key-file="+p.proxyKey,
	)
}

// frontAddress is where Envoy listens: every IPv4 address, or every IPv6 address on a control plane
// that advertises IPv6 (Envoy binds "::" IPv6-only unless told otherwise).
func (o Options) frontAddress() string {
	if o.ipv6() {
		return "::"
	}
	return "0.0.0.0"
}

func (o Options) ipv6() bool {
	host, _, _ := net.SplitHostPort(o.APIServerEndpoint)
	ip := net.ParseIP(host)
	return ip != nil && ip.To4() == nil
}

func (o Options) loopback() string {
	if o.ipv6() {
		return "::1"
	}
	return "127.0.0.1"
}

func hostPath(name, path string, typ corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
}

func mount(name, path string, readOnly bool) corev1.VolumeMount {
	return corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: readOnly}
}

// staticPod is what both pods share: host network without cluster DNS, node-critical priority, no
// service account token, and a container that runs as root (it reads root-only keys and sockets)
// with no capability and a read-only root file system.
func staticPod(name string, c corev1.Container, volumes []corev1.Volume, annotations map[string]string) *corev1.Pod {
	root, no, yes := int64(0), false, true
	prio := nodeCriticalPriority
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser: &root, RunAsGroup: &root, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: annotations, Labels: map[string]string{
			"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "skewgate-kubeadm", "component": name, "tier": "control-plane",
		}},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			// Resolve nothing through cluster DNS: every address in these pods is an IP or a socket.
			DNSPolicy:                    corev1.DNSDefault,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			PriorityClassName:            "system-node-critical",
			Priority:                     &prio,
			SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers:                   []corev1.Container{c},
			Volumes:                      volumes,
		},
	}
}

func resources(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
	}}
}

func httpProbe(path, hostPort string, period, failures int32) *corev1.Probe {
	host, port, _ := net.SplitHostPort(hostPort)
	n, _ := strconv.Atoi(port)
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Port: intstr.FromInt32(int32(n)), Path: path}},
		PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 5,
	}
}

// skewgatePod runs `skewgate serve` against the local apiserver. It sees its own directory (its
// credential and the CA certificate) and the socket directory.
func (o Options) skewgatePod(clientCertPEM, caPEM []byte) *corev1.Pod {
	p := o.paths()
	sum := sha256.Sum256(append(append(append([]byte{}, clientCertPEM...), 0), caPEM...))
	c := corev1.Container{
		Name: "skewgate", Image: o.SkewgateImage,
		Command:        []string{"/skewgate"},
		Args:           o.ServeArgs(),
		ReadinessProbe: httpProbe("/readyz", o.HTTPListen, 2, 3),
		LivenessProbe:  httpProbe("/healthz", o.HTTPListen, 10, 6),
		Resources:      resources("100m", "128Mi"),
		VolumeMounts:   []corev1.VolumeMount{mount("config", p.skewgateDir, true), mount("sockets", o.SocketDir, false)},
	}
	return staticPod("skewgate", c, []corev1.Volume{
		hostPath("config", p.skewgateDir, corev1.HostPathDirectory),
		hostPath("sockets", o.SocketDir, corev1.HostPathDirectory),
	}, map[string]string{certHashAnnotation: hex.EncodeToString(sum[:])})
}

// envoyPod runs Envoy with the bootstrap; everything else it learns from its own skewgate over the
// xDS socket. Its directory holds the bootstrap and copies of the node's serving certificate,
// front-proxy client certificate and CA: Envoy watches that directory, so when the command refreshes
// a copy (by a rename, key first) Envoy serves the new one without a restart. The command names the
// envoy binary so that no image entrypoint switches to another user: the keys it reads are root's.
func (o Options) envoyPod() *corev1.Pod {
	p := o.paths()
	c := corev1.Container{
		Name: "envoy", Image: o.EnvoyImage,
		Command: []string{"envoy"},
		// A static pod is never hot-restarted, and hot restart's abstract sockets live in the host
		// network namespace, where another Envoy on the same base id would make this one fail to
		// start (--disable-hot-restart, source/server/options_impl.cc).
		Args:  []string{"-c", p.bootstrap, "--log-level", "warn", "--disable-hot-restart"},
		Ports: []corev1.ContainerPort{{Name: "front", ContainerPort: int32(o.FrontPort), Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: o.loopback(), Port: intstr.FromInt32(int32(o.FrontPort))}},
			PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 5,
		},
		Resources: resources("250m", "128Mi"),
		VolumeMounts: []corev1.VolumeMount{
			mount("config", p.envoyDir, true),
			// Connecting to a unix socket needs write permission on it.
			mount("sockets", o.SocketDir, false),
		},
	}
	return staticPod("skewgate-envoy", c, []corev1.Volume{
		hostPath("config", p.envoyDir, corev1.HostPathDirectory),
		hostPath("sockets", o.SocketDir, corev1.HostPathDirectory),
	}, nil)
}
