package xds

import (
	"errors"
	"fmt"
	"net"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
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
	// Delta selects incremental xDS (the default in the rendered example); false is state of the world.
	Delta bool
	// AdminAddress is Envoy's admin listener, host:port; it must be loopback [127.0.0.1:9901].
	AdminAddress string
	// MaxConnections bounds downstream connections (overload manager) [50000].
	MaxConnections int
}

// Bootstrap returns the Envoy bootstrap for o, validated.
func Bootstrap(o BootstrapOptions) (*bootstrapv3.Bootstrap, error) {
	if o.AdminAddress == "" {
		o.AdminAddress = "127.0.0.1:9901"
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 50000
	}
	var errs []error
	if o.NodeID == "" || o.NodeCluster == "" {
		errs = append(errs, errors.New("node id and node cluster are required"))
	}
	adminHost, adminPort, err := splitHostPort(o.AdminAddress)
	if ip := net.ParseIP(adminHost); err != nil || ip == nil || !ip.IsLoopback() {
		errs = append(errs, fmt.Errorf("admin address %q must be a loopback ip:port: the admin API can change Envoy's state", o.AdminAddress))
	}
	errs = append(errs, grpcutil.CheckEndpoint("xDS address", o.XDSAddress, "--xds-ca-file, --xds-cert-file and --xds-key-file", o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	xdsCluster, err := grpcCluster(wire.XDSCluster, o.XDSAddress, o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile, o.XDSSNI)
	if err != nil {
		return nil, err
	}

	apiType := corev3.ApiConfigSource_GRPC
	if o.Delta {
		apiType = corev3.ApiConfigSource_DELTA_GRPC
	}
	runtime, err := structpb.NewStruct(map[string]any{
		"overload": map[string]any{"global_downstream_max_connections": o.MaxConnections},
	})
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
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: wire.XDSCluster},
				}}},
			},
			CdsConfig: adsSource(),
			LdsConfig: adsSource(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xdsCluster}},
		Admin:           &bootstrapv3.Admin{Address: socketAddress(adminHost, adminPort)},
		LayeredRuntime: &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{{
			Name: "static", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: runtime},
		}}},
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// BootstrapYAML renders b as YAML (protojson re-encoded, so the output is stable).
func BootstrapYAML(b *bootstrapv3.Bootstrap) ([]byte, error) {
	j, err := protojson.Marshal(b)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(j)
}
