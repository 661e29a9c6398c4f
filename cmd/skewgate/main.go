// Command skewgate is the control plane of an Envoy front for Kubernetes apiservers: it routes every
// request to an apiserver that serves it, so a version-skewed upgrade never answers a wrong 404.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/atomicfile"
	"github.com/skewgate/skewgate/internal/grpcutil"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/serve"
	"github.com/skewgate/skewgate/serve/options"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "skewgate",
		Short: "Upgrade-safe routing for Kubernetes apiservers",
		Long: `skewgate is the control plane of an Envoy proxy in front of a cluster's kube-apiservers.
It learns which apiserver serves which API and has Envoy send every request to one that serves it,
so clients never get a wrong 404 while apiservers of different versions run side by side.`,
		SilenceUsage: true,
	}
	root.AddCommand(newServeCommand(), newBootstrapCommand(), newTopologyCommand(os.Stdout), newVersionCommand(os.Stdout))
	root.AddCommand(newKubeadmCommand(os.Stdout))
	return root
}

// defaultGCPercent trades memory for ext_proc tail latency: fewer collections while serving.
const defaultGCPercent = 400

func newServeCommand() *cobra.Command {
	o := options.NewOptions()
	gcPercent := defaultGCPercent
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run discovery, the xDS server and the ext_proc server",
		Long: `Run discovery, the xDS server and the ext_proc server. The process exits non-zero as soon as
one of them fails, so that its supervisor restarts it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			errs := o.Validate()
			if err := checkGCPercent(gcPercent); err != nil {
				errs = append(errs, err)
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			log, err := serve.NewLogger(o.LogFormat, o.LogLevel)
			if err != nil {
				return err
			}
			defer log.Sync()
			// Process-wide settings belong to the command, never to the packages it runs.
			if gcPercent > 0 {
				debug.SetGCPercent(gcPercent)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, done, err := serve.Start(ctx, o, serve.Listeners{}, log)
			if err != nil {
				return err
			}
			return <-done
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().IntVar(&gcPercent, "gc-percent", gcPercent, "Go GC target percentage, 10 to 1000; higher trades memory for ext_proc tail latency (-1 leaves GOGC alone)")
	return cmd
}

// checkGCPercent accepts -1 (GOGC as the environment sets it) or 10 to 1000. Lower values collect
// almost continuously, any other negative value turns the collector off, and past 1000 the heap may
// grow to 11 times the live data.
func checkGCPercent(v int) error {
	if v == -1 || (v >= 10 && v <= 1000) {
		return nil
	}
	return fmt.Errorf("--gc-percent=%d: want -1 (leave GOGC alone) or 10 to 1000", v)
}

func newBootstrapCommand() *cobra.Command {
	var o envoyconf.BootstrapOptions
	var out, sdsOut string
	var sotw, plaintextLoopback bool
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Render the Envoy bootstrap that connects an Envoy to skewgate (and, with mTLS, its SDS files)",
		Long: `Render the Envoy bootstrap that connects an Envoy to skewgate. With mTLS to the xDS server
(--xds-ca-file, --xds-cert-file, --xds-key-file) Envoy loads its client certificate and CA through
two SDS files, so it reloads them when they are rotated: they are written to --sds-output-dir
(default: --sds-dir, the directory Envoy reads them from).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Delta = !sotw
			// As `skewgate serve` refuses to listen there: whoever binds a loopback port first can
			// configure this Envoy.
			if grpcutil.IsLoopbackTCP(o.XDSAddress) && o.XDSCAFile+o.XDSCertFile+o.XDSKeyFile == "" && !plaintextLoopback {
				return fmt.Errorf("--xds-address=%s: plaintext gRPC on loopback TCP is open to every local user and host-network pod: use a unix socket (unix:///path), or give --xds-ca-file, --xds-cert-file and --xds-key-file; %s allows it for development and tests", o.XDSAddress, grpcutil.PlaintextLoopbackFlag)
			}
			b, err := envoyconf.Bootstrap(o)
			if err != nil {
				return err
			}
			y, err := envoyconf.BootstrapYAML(b)
			if err != nil {
				return err
			}
			sds, err := envoyconf.BootstrapSDSFiles(o)
			if err != nil {
				return err
			}
			if sdsOut == "" {
				sdsOut = o.SDSDir
			}
			for _, name := range slices.Sorted(maps.Keys(sds)) {
				if err := os.MkdirAll(sdsOut, 0o755); err != nil {
					return fmt.Errorf("--sds-output-dir: %w", err)
				}
				if err := writeAtomic(filepath.Join(sdsOut, name), sds[name]); err != nil {
					return fmt.Errorf("--sds-output-dir: %w", err)
				}
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(y)
				return err
			}
			return writeAtomic(out, y)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.NodeID, "node-id", "", "Envoy node id (e.g. the host name)")
	fs.StringVar(&o.NodeCluster, "node-cluster", "skewgate-front", "Envoy node cluster")
	fs.StringVar(&o.XDSAddress, "xds-address", options.DefaultXDSListen, "skewgate's xDS address, unix:///path or host:port with mTLS")
	fs.BoolVar(&plaintextLoopback, "grpc-plaintext-loopback", false, "allow plaintext xDS on loopback TCP, for development and tests only (skewgate serve needs it too)")
	fs.StringVar(&o.XDSCAFile, "xds-ca-file", "", "CA verifying skewgate's xDS certificate")
	fs.StringVar(&o.XDSCertFile, "xds-cert-file", "", "Envoy's client certificate for xDS")
	fs.StringVar(&o.XDSKeyFile, "xds-key-file", "", "key of --xds-cert-file")
	fs.StringVar(&o.XDSSNI, "xds-sni", "", "server name verified on the xDS certificate (default: its host)")
	fs.StringVar(&o.SDSDir, "sds-dir", envoyconf.DefaultSDSDir, "directory, as Envoy sees it, of the SDS files that load the xDS client certificate and CA (mTLS only)")
	fs.StringVar(&sdsOut, "sds-output-dir", "", "write the SDS files here instead of --sds-dir (e.g. to build a ConfigMap)")
	fs.StringVar(&o.AdminAddress, "admin-address", "127.0.0.1:9901", "Envoy admin listener: a loopback host:port, or unix:///path (a socket only Envoy's user may use)")
	fs.BoolVar(&sotw, "sotw", false, "use state-of-the-world xDS instead of delta")
	fs.StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

// writeAtomic writes data to path by a synced rename in its directory: Envoy watches these
// directories for moves and must never read a half-written file.
func writeAtomic(path string, data []byte) error { return atomicfile.WriteFile(path, data, 0o644) }

func newTopologyCommand(w io.Writer) *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Print the live Topology of a running skewgate: upstreams, capability sets, skewed APIs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/topology", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
			if asJSON {
				_, err = w.Write(body)
				return err
			}
			var v serve.TopologyView
			if err := json.Unmarshal(body, &v); err != nil {
				return err
			}
			return printTopology(w, v)
		},
	}
	cmd.Flags().StringVar(&addr, "server", "127.0.0.1:18080", "skewgate's --http-listen address")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	return cmd
}

func printTopology(w io.Writer, v serve.TopologyView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Topology %s (generated %s), Envoy snapshot %s\n", v.Version, v.Generated.Format(time.RFC3339), v.Snapshot)
	switch {
	case !v.Deciding:
		fmt.Fprintln(tw, "No Envoy has acknowledged a snapshot of this process yet: this is discovery's newest Topology; Envoy's route table decides.")
	case v.Discovered != "" && v.Discovered != v.Version:
		fmt.Fprintf(tw, "ext_proc decides with this Topology; discovery's newer %s waits for every Envoy to acknowledge its snapshot.\n", v.Discovered)
	default:
		fmt.Fprintln(tw, "ext_proc decides with this Topology, discovery's newest.")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "UPSTREAM\tADDRESS\tVERSION\tREADY\tSOURCE\tRESOURCES\tCLUSTER")
	for _, u := range v.Upstreams {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%d\t%s\n", u.Name, u.Address, u.Version, u.Ready, u.Source, u.Resources, wire.UpstreamCluster(u.Name))
	}
	for _, u := range v.Unproven {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t-\t(unproven: no cluster)\n", u.Name, u.Address, u.Version, u.Ready, u.Source)
	}
	if len(v.Ignored) > 0 {
		fmt.Fprintln(tw, "\nIGNORED LEASE\tHOSTNAME\tREASON\tHINT")
		for _, l := range v.Ignored {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Lease, l.Hostname, l.Reason, l.Hint)
		}
	}
	if len(v.Sets) > 0 {
		fmt.Fprintln(tw, "\nCAPABILITY SET\tMEMBERS")
		for _, s := range v.Sets {
			fmt.Fprintf(tw, "%s\t%s\n", wire.SetCluster(s.Members), strings.Join(s.Members, ","))
		}
	}
	fmt.Fprintf(tw, "\nSKEWED RESOURCE\tVERB\tDECISION\tCLUSTER\n")
	for _, s := range v.Skewed {
		name := s.Key.Resource
		if s.Key.Subresource != "" {
			name += "/" + s.Key.Subresource
		}
		gv := s.Key.Version
		if s.Key.Group != "" {
			gv = s.Key.Group + "/" + gv
		}
		cluster := ""
		if s.Set != "" {
			cluster = wire.SetCluster(s.Set.Members())
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\n", gv, name, s.Verb, s.Decision, cluster)
	}
	if len(v.Unexpressed) > 0 {
		fmt.Fprintf(tw, "\nDECIDED WITHOUT A ROUTE IN ENVOY\tREASON\n")
		for _, u := range v.Unexpressed {
			fallback := "the default route"
			if u.OpenAPI != "" {
				fallback = "the schema routes"
			}
			fmt.Fprintf(tw, "%s\t%s (ext_proc decides it; failing open it takes %s)\n", u.String(), u.Reason, fallback)
		}
	}
	if len(v.OpenAPI) > 0 {
		fmt.Fprintf(tw, "\nOPENAPI V3 DOCUMENT\tHASH\tDECISION\tCLUSTER\tWHY\n")
		for _, d := range v.OpenAPI {
			cluster := ""
			if d.Set != "" {
				cluster = wire.SetCluster(d.Set.Members())
			}
			if d.Action == discovery.ActionServe {
				cluster = "merged at the front; failing open " + cluster
			}
			fmt.Fprintf(tw, "/openapi/v3/%s\t%.12s\t%s\t%s\t%s\n", d.Key, d.Hash, d.Action, cluster, printable(d.Why))
		}
	}
	return tw.Flush()
}

func newVersionCommand(w io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print skewgate's version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(w, "skewgate", version) },
	}
}

// printable replaces what a terminal would act on (a reason can quote an upstream's document).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}
