package envoyconf

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/internal/grpcutil"
	"github.com/skewgate/skewgate/internal/wire"
)

// BootstrapOptions describe the Envoy that fronts the apiservers: who it is and where its control
// plane is. Everything else arrives over ADS.
type BootstrapOptions struct {
	NodeID, NodeCluster string
	// XDSAddress is skewgate's xDS server, host:port or unix:///path.
	XDSAddress string
	// XDSCAFile, XDSCertFile and XDSKeyFile turn on mTLS to the xDS server (required unless the
	// address is loopback or a unix socket). XDSSNI defaults to the host of XDSAddress.
	XDSCAFile, XDSCertFile, XDSKeyFile, XDSSNI string
	// SDSDir is the directory, as Envoy sees it, of the SDS files (BootstrapSDSFiles) through which
	// Envoy loads the xDS client certificate and CA, so it reloads them when they are rotated
	// [/etc/skewgate/envoy/sds]. Used with mTLS only.
	SDSDir string
	// Delta selects incremental xDS (the default in the rendered example); false is state of the world.
	Delta bool
	// AdminAddress is Envoy's admin listener: a loopback host:port, or unix:///path for a socket only
	// its owner may use (mode 0600), which no other local user or host-network pod can reach
	// [127.0.0.1:9901].
	AdminAddress string
	// MaxConnections bounds the downstream connections of all listeners together (the overload
	// manager's downstream-connections monitor, GlobalConnectionsMonitor) [50000].
	MaxConnections int
}

// DefaultSDSDir is BootstrapOptions.SDSDir's default.
const DefaultSDSDir = "/etc/skewgate/envoy/sds"

// The bootstrap's SDS secrets and the files in SDSDir that hold them, one secret per file: a file
// SDS subscription passes every resource of its file to the one secret it serves, which accepts
// exactly one (source/common/secret/sds_api.cc, validateUpdateSize, in the main copies read from
// 2020 on; none at a supported release tag).
const (
	SecretXDSCert  = "skewgate-xds-client-cert"
	SecretXDSCA    = "skewgate-xds-ca"
	XDSCertSDSFile = "xds-client-cert.yaml"
	XDSCASDSFile   = "xds-ca.yaml"
)

func (o BootstrapOptions) withDefaults() BootstrapOptions {
	if o.AdminAddress == "" {
		o.AdminAddress = "127.0.0.1:9901"
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 50000
	}
	if o.SDSDir == "" {
		o.SDSDir = DefaultSDSDir
	}
	return o
}

// fileSDS references a secret in a file of o.SDSDir. Envoy reads such a file with a filesystem
// subscription; with watched_directory it rereads it on a move into that directory
// (source/common/config/filesystem_subscription_impl.cc, FilesystemSubscriptionImpl, in a main
// copy whose commit was not recorded; none at a supported release tag).
func (o BootstrapOptions) fileSDS(name, file string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{
			Path:             path.Join(o.SDSDir, file),
			WatchedDirectory: &corev3.WatchedDirectory{Path: o.SDSDir},
		}},
	}}
}

// BootstrapSDSFiles returns the SDS files the bootstrap of o references, by file name in o.SDSDir:
// none without mTLS.
func BootstrapSDSFiles(o BootstrapOptions) (map[string][]byte, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.XDSCAFile == "" {
		return nil, nil
	}
	out := map[string][]byte{}
	for file, sec := range map[string]*tlsv3.Secret{
		XDSCertSDSFile: CertSecret(SecretXDSCert, o.XDSCertFile, o.XDSKeyFile),
		XDSCASDSFile:   CASecret(SecretXDSCA, o.XDSCAFile),
	} {
		if err := sec.ValidateAll(); err != nil {
			return nil, err
		}
		a, err := anypb.New(sec)
		if err != nil {
			return nil, err
		}
		y, err := messageYAML(&discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{a}})
		if err != nil {
			return nil, err
		}
		out[file] = y
	}
	return out, nil
}

func (o BootstrapOptions) validate() error {
	var errs []error
	if o.NodeID == "" || o.NodeCluster == "" {
		errs = append(errs, errors.New("node id and node cluster are required"))
	}
	if p, ok := strings.CutPrefix(o.AdminAddress, "unix://"); ok {
		if !path.IsAbs(p) {
			errs = append(errs, fmt.Errorf("admin address %q: want unix:///absolute/path", o.AdminAddress))
		}
	} else if adminHost, _, err := splitHostPort(o.AdminAddress); err != nil || net.ParseIP(adminHost) == nil || !net.ParseIP(adminHost).IsLoopback() {
		errs = append(errs, fmt.Errorf("admin address %q must be a loopback ip:port or unix:///path: the admin API can change Envoy's state", o.AdminAddress))
	}
	if o.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("max connections %d: want a positive number", o.MaxConnections))
	}
	errs = append(errs, grpcutil.CheckEndpoint("xDS address", o.XDSAddress, "--xds-ca-file, --xds-cert-file and --xds-key-file", o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile)...)
	if o.XDSCAFile != "" {
		for _, f := range []string{o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile, o.SDSDir} {
			if !path.IsAbs(f) {
				errs = append(errs, fmt.Errorf("%q must be an absolute path: Envoy resolves it", f))
			}
		}
		if path.Dir(o.XDSCertFile) != path.Dir(o.XDSKeyFile) {
			errs = append(errs, fmt.Errorf("--xds-cert-file %q and --xds-key-file %q must be in the same directory: Envoy reloads them on a move into one watched directory", o.XDSCertFile, o.XDSKeyFile))
		}
	}
	return errors.Join(errs...)
}

// Bootstrap returns the Envoy bootstrap for o, validated. With mTLS its xDS cluster loads the client
// certificate and CA through the SDS files BootstrapSDSFiles renders, so they reload on rotation.
func Bootstrap(o BootstrapOptions) (*bootstrapv3.Bootstrap, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	admin, err := adminAddress(o.AdminAddress)
	if err != nil {
		return nil, err
	}
	var creds *GRPCCreds
	if o.XDSCAFile != "" {
		creds = &GRPCCreds{Cert: o.fileSDS(SecretXDSCert, XDSCertSDSFile), CA: o.fileSDS(SecretXDSCA, XDSCASDSFile)}
	}
	xdsCluster, err := GRPCCluster(wire.XDSCluster, o.XDSAddress, o.XDSSNI, creds)
	if err != nil {
		return nil, err
	}

	apiType := corev3.ApiConfigSource_GRPC
	if o.Delta {
		apiType = corev3.ApiConfigSource_DELTA_GRPC
	}
	overload, err := globalConnectionsMonitor(o.MaxConnections)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: o.NodeID, Cluster: o.NodeCluster},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   apiType,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: wire.XDSCluster, RetryPolicy: xdsReconnect},
				}}},
			},
			CdsConfig: ADSSource(),
			LdsConfig: ADSSource(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xdsCluster}},
		// The admin listener is loopback or a 0600 socket: it stays reachable to the operator when
		// a flood holds every downstream connection (TcpListenerImpl::rejectCxOverGlobalLimit
		// returns early for a listener with ignore_global_conn_limit).
		Admin:           &bootstrapv3.Admin{Address: admin, IgnoreGlobalConnLimit: true},
		OverloadManager: overload,
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// BootstrapYAML renders b as YAML (protojson re-encoded, so the output is stable).
func BootstrapYAML(b *bootstrapv3.Bootstrap) ([]byte, error) { return messageYAML(b) }

func messageYAML(m proto.Message) ([]byte, error) {
	j, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(j)
}

// adminAddress is the admin listener's address: a pipe (Pipe.mode 0600: only Envoy's own user may
// connect) or a loopback socket address.
func adminAddress(addr string) (*corev3.Address, error) {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: p, Mode: 0o600}}}, nil
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return SocketAddress(host, port), nil
}

// xdsReconnect is how soon Envoy redials skewgate after the ADS stream failed: jittered exponential
// back-off from 100 ms to at most 1 s. Without it Envoy backs off from 500 ms to 30 s
// (SubscriptionFactory::RetryInitialDelayMs/RetryMaxDelayMs), so an Envoy that started before its
// skewgate, as static pods after a cold start may, could wait half a minute for its first listener.
// Envoy reads it from the first gRPC service of ads_config (Config::Utility::
// prepareJitteredExponentialBackOffStrategy, source/common/config/utility.h, read in a 2026 main copy
// whose commit was not recorded; none at a supported release tag).
var xdsReconnect = &corev3.RetryPolicy{RetryBackOff: &corev3.BackoffStrategy{
	BaseInterval: durationpb.New(100 * time.Millisecond),
	MaxInterval:  durationpb.New(time.Second),
}}
