package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/kubeadm"
)

func newKubeadmCommand(w io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubeadm",
		Short: "Install skewgate and Envoy beside the apiserver of a kubeadm control-plane node",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newKubeadmInstallCommand(w), newKubeadmRBACCommand(w))
	return cmd
}

func newKubeadmRBACCommand(w io.Writer) *cobra.Command {
	var kubernetesEndpoints bool
	cmd := &cobra.Command{
		Use:   "rbac",
		Short: "Print the RBAC of user skewgate (what install writes to <config-dir>/rbac.yaml), for kubectl apply -f -",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			y, err := kubeadm.RBACYAMLFor(kubernetesEndpoints)
			if err != nil {
				return err
			}
			_, err = w.Write(y)
			return err
		},
	}
	cmd.Flags().BoolVar(&kubernetesEndpoints, "kubernetes-endpoints", false, "also what `serve --kubernetes-endpoints` needs: update the default/kubernetes Endpoints and EndpointSlice (by name), namespace skewgate and its member Leases (docs/kubernetes-service.md)")
	return cmd
}

func newKubeadmInstallCommand(w io.Writer) *cobra.Command {
	var o kubeadm.Options
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Render skewgate's and Envoy's static pods, Envoy's bootstrap, skewgate's credential and RBAC on this node",
		Long: `Run on each kubeadm control-plane node, as root. It writes:

  <manifests-dir>/skewgate.yaml, skewgate-envoy.yaml  two static pods, host network, system-node-critical
  <config-dir>/skewgate/  kubeconfig, skewgate.{crt,key} (user "skewgate", issued from <pki-dir>/ca.{crt,key}), ca.crt
  <config-dir>/envoy/     bootstrap.yaml, and copies of <pki-dir>/{ca.crt,apiserver.*,front-proxy-client.*}
  <config-dir>/rbac.yaml  apply once per cluster: kubectl apply -f
  <socket-dir>/           xds.sock and extproc.sock, between the two pods

skewgate reads Leases and discovery from the local apiserver (--apiserver-endpoint, by default the
advertise address in <manifests-dir>/kube-apiserver.yaml), which is also its static upstream. Envoy
serves the front on --front-port with the node's apiserver certificate. Each pod sees only its own
directory.

With --components-via-front it also points <kubeconfig-dir>/controller-manager.conf and
scheduler.conf at this node's front and restarts their static pods (an annotation on their
manifests); running it again without the flag points them back at the local apiserver. Running it again with the same inputs changes nothing; a client certificate that is still
good is kept. After kubeadm renews the node's certificates, run it again: Envoy reloads the copies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o = o.WithDefaults()
			o, err := o.DetectNode()
			if err != nil {
				return err
			}
			plan, err := kubeadm.Render(o)
			if err != nil {
				return err
			}
			changes, err := kubeadm.Apply(plan, dryRun, w)
			if err != nil {
				return err
			}
			verb := map[bool]string{true: "would ", false: ""}[dryRun]
			n := 0
			for _, c := range changes {
				if c.Action != "unchanged" {
					n++
					if !dryRun {
						fmt.Fprintf(w, "%s %s\n", c.Action, c.Path)
					}
				}
			}
			if n == 0 {
				fmt.Fprintln(w, "nothing to do: every file is up to date")
				return nil
			}
			if plan.Issued {
				fmt.Fprintf(w, "# %sissue a client certificate for user %q\n", verb, kubeadm.User)
			}
			fmt.Fprintf(w, "# %schange %d paths. Apply the RBAC once per cluster, with an admin credential:\n#   kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f %s\n",
				verb, n, filepath.Join(o.ConfigDir, kubeadm.RBACFile))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.NodeName, "node-name", "", "this node's name as its apiserver's identity Lease has it (default: the lowercase host name)")
	fs.StringVar(&o.APIServerEndpoint, "apiserver-endpoint", "", "the local apiserver, ip:port (default: from the kube-apiserver static pod)")
	fs.StringVar(&o.PKIDir, "pki-dir", kubeadm.DefaultPKIDir, "kubeadm's certificate directory")
	fs.StringVar(&o.ManifestsDir, "manifests-dir", kubeadm.DefaultManifestsDir, "the kubelet's static pod directory")
	fs.StringVar(&o.ConfigDir, "config-dir", kubeadm.DefaultConfigDir, "directory for skewgate's kubeconfig, certificate, Envoy's bootstrap and the RBAC")
	fs.StringVar(&o.KubeconfigDir, "kubeconfig-dir", kubeadm.DefaultKubeconfigDir, "kubeadm's directory of controller-manager.conf and scheduler.conf")
	fs.BoolVar(&o.ComponentsViaFront, "components-via-front", false, "point controller-manager.conf and scheduler.conf at this node's front (https://<advertise address>:<front port>), keeping their credentials, and restart those static pods; run install without it first, and with it once the front serves. Without it, kubeconfigs that name the front are pointed back at the local apiserver")
	fs.StringVar(&o.SocketDir, "socket-dir", kubeadm.DefaultSocketDir, "root-only directory of the xDS and ext_proc unix sockets")
	fs.IntVar(&o.FrontPort, "front-port", kubeadm.DefaultFrontPort, "port Envoy serves the front on (not the apiserver's)")
	fs.StringVar(&o.HTTPListen, "http-listen", kubeadm.DefaultHTTPListen, "skewgate's loopback address for /healthz, /readyz, /metrics")
	fs.StringArrayVar(&o.AllowedCIDRs, "allowed-cidr", nil, "passed to skewgate serve --allowed-cidr (repeatable)")
	fs.BoolVar(&o.ForwardCertificateUID, "forward-certificate-uid", false, "passed to skewgate serve: only when every apiserver runs --requestheader-uid-headers=X-Remote-Uid (kubeadm does not set it; add it in ClusterConfiguration apiServer.extraArgs first)")
	fs.BoolVar(&o.KubernetesEndpoints, "kubernetes-endpoints", false, "passed to skewgate serve (with this node's advertise address): the front joins the default/kubernetes Service's endpoints; the RBAC gains what it needs. Needs the apiservers on --endpoint-reconciler-type=none (docs/kubernetes-service.md); install again without it to take the node out")
	defaultImage := kubeadm.SkewgateImage(version)
	if version == "dev" {
		defaultImage = "" // a development build does not know its release: the flag is required
	}
	fs.StringVar(&o.SkewgateImage, "skewgate-image", defaultImage, "skewgate's container image (default: this binary's release)")
	fs.StringVar(&o.EnvoyImage, "envoy-image", kubeadm.DefaultEnvoyImage, "Envoy's container image (a supported release)")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be written (keys redacted) and write nothing")
	return cmd
}
