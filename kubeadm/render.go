package kubeadm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// File is one file the command owns.
type File struct {
	Path string
	Mode os.FileMode
	Data []byte
	// Secret files are redacted in dry-run output.
	Secret bool
}

// Dir is a directory the command creates (or whose mode it corrects).
type Dir struct {
	Path string
	Mode os.FileMode
	// Foreign directories (the kubelet's manifests directory) are created when missing but their
	// mode is never changed.
	Foreign bool
}

// Plan is everything Render decided; Apply carries it out.
type Plan struct {
	Dirs  []Dir
	Files []File
	// Issued is true when the client certificate is new (none, or the existing one is not good).
	Issued bool
}

const header = "# Rendered by `skewgate kubeadm install`; edits are overwritten when it runs again.\n"

// RBACFile is the name, in ConfigDir, of the RBAC to apply with an admin credential.
const RBACFile = "rbac.yaml"

// Render validates o (after WithDefaults), reads the node's PKI and the existing client certificate,
// and returns the plan. It writes nothing.
func Render(o Options) (*Plan, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkServeArgs(o.ServeArgs()); err != nil {
		return nil, err
	}
	p := o.paths()
	c, err := readCredentials(o, p)
	if err != nil {
		return nil, err
	}
	b, err := renderBootstrap(o, p)
	if err != nil {
		return nil, err
	}
	m, err := renderManifests(o, c)
	if err != nil {
		return nil, err
	}
	comps, err := renderComponents(o)
	if err != nil {
		return nil, err
	}
	plan := newPlan(o, p, c, b, m)
	// After the front's pods: each kubeconfig before its component's pod, whose change restarts it.
	if len(comps) > 0 {
		plan.Dirs = append(plan.Dirs, Dir{Path: o.KubeconfigDir, Mode: 0o755, Foreign: true})
	}
	plan.Files = append(plan.Files, comps...)
	return plan, nil
}

// credentials are the node's PKI files and skewgate's client certificate (kept, or newly issued).
type credentials struct {
	node       *nodeFiles
	certPEM    []byte
	keyPEM     []byte
	issued     bool
	kubeconfig []byte
}

// readCredentials reads the node's PKI and the client certificate in ConfigDir, issuing a new one
// when it is missing or no longer good, and renders skewgate's kubeconfig.
func readCredentials(o Options, p paths) (*credentials, error) {
	now := o.Now()
	node, err := readNodeFiles(o.PKIDir, now)
	if err != nil {
		return nil, err
	}
	ca, err := readCA(o.PKIDir, now)
	if err != nil {
		return nil, err
	}
	c := &credentials{node: node}
	if c.certPEM, c.keyPEM, c.issued, err = ca.clientCert(o.ConfigDir, now, node.servingExpiry); err != nil {
		return nil, err
	}
	if c.kubeconfig, err = kubeconfig("https://"+o.APIServerEndpoint, p.skewgateCA, p.certFile, p.keyFile); err != nil {
		return nil, err
	}
	return c, nil
}

// bootstrap is Envoy's rendered bootstrap and the SDS files it names, by file name in sdsDir.
type bootstrap struct {
	yaml   []byte
	sdsDir string
	sds    map[string][]byte
}

// renderBootstrap renders Envoy's bootstrap: ADS over the socket in the root-only directory.
func renderBootstrap(o Options, p paths) (*bootstrap, error) {
	// The admin API can stop Envoy or drain its listener: on a host-network pod a loopback port is
	// open to every local user and pod, a socket in the root-only directory is not.
	bo := envoyconf.BootstrapOptions{NodeID: o.NodeName, NodeCluster: "skewgate-front", XDSAddress: p.xdsSocket, Delta: true,
		SDSDir: filepath.Join(p.envoyDir, "sds"), AdminAddress: p.adminSocket}
	b, err := envoyconf.Bootstrap(bo)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	by, err := envoyconf.BootstrapYAML(b)
	if err != nil {
		return nil, err
	}
	sds, err := envoyconf.BootstrapSDSFiles(bo) // none: the socket needs no mTLS
	if err != nil {
		return nil, err
	}
	return &bootstrap{yaml: append([]byte(header), by...), sdsDir: bo.SDSDir, sds: sds}, nil
}

// manifests are the RBAC to apply and the two static pods.
type manifests struct {
	rbac, skewgate, envoy []byte
}

func renderManifests(o Options, c *credentials) (*manifests, error) {
	rbac, err := RBACYAMLFor(o.KubernetesEndpoints)
	if err != nil {
		return nil, err
	}
	sg, err := objectsYAML(o.skewgatePod(c.certPEM, c.node.ca))
	if err != nil {
		return nil, err
	}
	envoy, err := objectsYAML(o.envoyPod())
	if err != nil {
		return nil, err
	}
	return &manifests{rbac: rbac, skewgate: sg, envoy: envoy}, nil
}

// newPlan lays out the directories and files in the order Apply writes them.
func newPlan(o Options, p paths, c *credentials, b *bootstrap, m *manifests) *Plan {
	plan := &Plan{Issued: c.issued, Dirs: []Dir{
		{Path: o.ConfigDir, Mode: 0o755}, {Path: p.skewgateDir, Mode: 0o700}, {Path: p.envoyDir, Mode: 0o700},
		{Path: o.SocketDir, Mode: 0o700}, {Path: o.ManifestsDir, Mode: 0o700, Foreign: true},
	}}
	// Keys before their certificates: Envoy reloads a pair on each move into its directory, and a
	// new key with the old certificate is refused (it keeps the old pair) until the certificate follows.
	plan.Files = []File{
		{Path: p.keyFile, Mode: 0o600, Data: c.keyPEM, Secret: true},
		{Path: p.certFile, Mode: 0o644, Data: c.certPEM},
		{Path: p.skewgateCA, Mode: 0o644, Data: c.node.ca},
		{Path: p.kubeconfig, Mode: 0o600, Data: c.kubeconfig},
		{Path: p.envoyCA, Mode: 0o644, Data: c.node.ca},
		{Path: p.servingKey, Mode: 0o600, Data: c.node.servingKey, Secret: true},
		{Path: p.servingCert, Mode: 0o644, Data: c.node.servingCert},
		{Path: p.proxyKey, Mode: 0o600, Data: c.node.proxyKey, Secret: true},
		{Path: p.proxyCert, Mode: 0o644, Data: c.node.proxyCert},
		{Path: p.bootstrap, Mode: 0o644, Data: b.yaml},
	}
	if len(b.sds) > 0 {
		plan.Dirs = append(plan.Dirs, Dir{Path: b.sdsDir, Mode: 0o700})
	}
	for _, name := range slices.Sorted(maps.Keys(b.sds)) {
		plan.Files = append(plan.Files, File{Path: filepath.Join(b.sdsDir, name), Mode: 0o644, Data: b.sds[name]})
	}
	plan.Files = append(plan.Files,
		File{Path: filepath.Join(o.ConfigDir, RBACFile), Mode: 0o644, Data: m.rbac},
		// The pods last: when the kubelet starts them, everything they mount is in place.
		File{Path: filepath.Join(o.ManifestsDir, "skewgate.yaml"), Mode: 0o600, Data: m.skewgate},
		File{Path: filepath.Join(o.ManifestsDir, "skewgate-envoy.yaml"), Mode: 0o600, Data: m.envoy},
	)
	return plan
}

// RBACYAML is the RBAC of RBAC(false) as the command writes it to ConfigDir/RBACFile.
func RBACYAML() ([]byte, error) { return RBACYAMLFor(false) }

// RBACYAMLFor is RBAC(kubernetesEndpoints) as YAML (`skewgate kubeadm rbac [--kubernetes-endpoints]`).
func RBACYAMLFor(kubernetesEndpoints bool) ([]byte, error) {
	return objectsYAML(RBAC(kubernetesEndpoints)...)
}

// checkServeArgs parses args with serve's own flags and validation, so the pod never runs with a
// flag serve does not know or refuses.
func checkServeArgs(args []string) error {
	so := options.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	so.AddFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("skewgate serve arguments: %w", err)
	}
	so.Complete()
	if errs := so.Validate(); len(errs) > 0 {
		return fmt.Errorf("skewgate serve arguments: %w", errors.Join(errs...))
	}
	return nil
}

// objectsYAML renders objects as YAML documents, without the empty status and creation timestamp
// the API types carry.
func objectsYAML(objs ...runtime.Object) ([]byte, error) {
	var out bytes.Buffer
	out.WriteString(header)
	for i, obj := range objs {
		j, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		if meta, ok := m["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), nil
}
