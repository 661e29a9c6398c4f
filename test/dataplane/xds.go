package dataplane

import (
	"context"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// node is what Envoy sends as its identity: id and cluster from the bootstrap, user_agent_name
// "envoy" and user_agent_build_version with the release (source/common/local_info/local_info_impl.h,
// which sets both from VersionInfo::buildVersion()).
func (d *DataPlane) node() *corev3.Node {
	v, _ := parseVersion(d.cfg.EnvoyVersion)
	return &corev3.Node{
		Id: d.cfg.NodeID, Cluster: d.cfg.NodeCluster, UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: v[0], MinorNumber: v[1], Patch: v[2]},
		}},
	}
}

// subscriber is one ADS stream, SotW or delta: it (re)declares the names it wants per type and
// answers every response with an ACK or a NACK.
type subscriber interface {
	subscribe(typeURL string, names []string) error
}

// xdsState follows Envoy's initialization order on one ADS stream: CDS first (wildcard), LDS once
// the cluster manager initialized (at once on a later stream, as Envoy re-sends every watch when it
// reconnects), RDS for the name the listener's HCM carries, and SDS for the secrets the accepted
// TLS contexts name (Envoy subscribes to an SDS secret when a transport socket names it).
type xdsState struct {
	cmInit        <-chan struct{} // closed once the cluster manager initialized; nil once acted on
	listenerAsked bool
	routeNames    []string
	clusterRefs   []string
	listenerRefs  []string
	secretNames   []string
}

// apply hands one type's complete current resource set to the data plane; an error is a NACK and
// changes nothing.
func (d *DataPlane) apply(st *xdsState, typeURL string, resources []*anypb.Any) error {
	switch typeURL {
	case resourcev3.ClusterType:
		refs, err := d.applyClusters(resources)
		d.cdsHandled() // accepted or not, the first CDS response completes CDS initialization
		if err != nil {
			return err
		}
		st.clusterRefs = refs
	case resourcev3.ListenerType:
		routes, refs, err := d.applyListener(resources)
		if err != nil {
			return err
		}
		st.routeNames, st.listenerRefs = routes, refs
	case resourcev3.RouteType:
		return d.applyRoutes(resources)
	case resourcev3.SecretType:
		return d.applySecrets(resources)
	}
	return nil
}

// follow sends the subscriptions an accepted response implies.
func (st *xdsState) follow(s subscriber, typeURL string) error {
	secrets := append(slices.Clone(st.clusterRefs), st.listenerRefs...)
	slices.Sort(secrets)
	secrets = slices.Compact(secrets)
	if !slices.Equal(secrets, st.secretNames) && len(secrets) > 0 {
		st.secretNames = secrets
		if err := s.subscribe(resourcev3.SecretType, secrets); err != nil {
			return err
		}
	}
	return nil
}

// accepted makes the subscriptions an accepted response of typeURL calls for: the types that follow
// it, and the route configuration if the listener now names another one.
func (st *xdsState) accepted(s subscriber, typeURL string, previousRoutes []string) error {
	if err := st.follow(s, typeURL); err != nil {
		return err
	}
	return st.followRoutes(s, previousRoutes)
}

// acceptedSotW makes the same subscriptions as accepted, in the order Envoy's state-of-the-world mux
// sends them, all before the ACK of the response that called for them
// (source/extensions/config_subscription/grpc/grpc_mux_impl.cc: GrpcMuxImpl::onDiscoveryResponse
// pauses the response's own type while its watches apply it and queues the ACK last; the CDS and LDS
// handlers pause the types that depend on them and resume them in the order they listed them when
// they return, RDS before SDS: source/common/upstream/cds_api_helper.cc,
// source/common/listener_manager/lds_api.cc).
func (st *xdsState) acceptedSotW(s subscriber, previousRoutes []string) error {
	if err := st.followRoutes(s, previousRoutes); err != nil {
		return err
	}
	return st.follow(s, "")
}

// askListeners subscribes to the listeners (wildcard) once.
func (st *xdsState) askListeners(s subscriber) error {
	if st.listenerAsked {
		return nil
	}
	st.listenerAsked = true
	return s.subscribe(resourcev3.ListenerType, nil)
}

// nextResponse waits for the stream's next response and, meanwhile, asks for the listeners once the
// cluster manager has initialized.
func nextResponse[T any](ctx context.Context, responses <-chan received[T], st *xdsState, s subscriber) (T, error) {
	var zero T
	for {
		select {
		case r := <-responses:
			return r.resp, r.err
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-st.cmInit:
			st.cmInit = nil
			if err := st.askListeners(s); err != nil {
				return zero, err
			}
		}
	}
}

// received is one response of an xDS stream, or the error that ended it.
type received[T any] struct {
	resp T
	err  error
}

// receive delivers the responses of a stream on a channel, so that the stream's loop can also
// wait for the cluster manager; it ends with the first error or when ctx ends.
func receive[T any](ctx context.Context, recv func() (T, error)) <-chan received[T] {
	ch := make(chan received[T])
	go func() {
		for {
			r, err := recv()
			select {
			case ch <- received[T]{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// followRoutes subscribes to the route configuration the accepted listener names.
func (st *xdsState) followRoutes(s subscriber, previous []string) error {
	if len(st.routeNames) > 0 && !slices.Equal(previous, st.routeNames) {
		return s.subscribe(resourcev3.RouteType, st.routeNames)
	}
	return nil
}
