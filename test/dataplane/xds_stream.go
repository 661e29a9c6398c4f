package dataplane

import (
	"context"
	"maps"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// nackStatus is the error_detail of a NACK (Envoy sends INVALID_ARGUMENT with the rejection).
func nackStatus(err error) *status.Status {
	if err == nil {
		return nil
	}
	return &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

// sotwStream is a state-of-the-world ADS stream: every request carries the full name list, the
// last accepted version and the nonce it answers. The node goes on the first message only
// (set_node_on_first_message_only in skewgate's bootstrap).
type sotwStream struct {
	s        discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	names    map[string][]string
	versions map[string]string
	nonces   map[string]string
}

func (s *sotwStream) send(typeURL string, nack error) error {
	req := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeURL, ResourceNames: s.names[typeURL],
		VersionInfo: s.versions[typeURL], ResponseNonce: s.nonces[typeURL], ErrorDetail: nackStatus(nack)}
	s.node = nil
	return s.s.Send(req)
}

func (s *sotwStream) subscribe(typeURL string, names []string) error {
	s.names[typeURL] = names
	return s.send(typeURL, nil)
}

func (d *DataPlane) subscribeSotW(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := &sotwStream{s: stream, node: d.node(), names: map[string][]string{}, versions: map[string]string{}, nonces: map[string]string{}}
	st := &xdsState{cmInit: d.cmInit}
	if err := s.subscribe(resourcev3.ClusterType, nil); err != nil {
		return err
	}
	responses := receive(ctx, stream.Recv)
	for {
		resp, err := nextResponse(ctx, responses, st, s)
		if err != nil {
			return err
		}
		prevRoutes := st.routeNames
		applyErr := d.apply(st, resp.TypeUrl, resp.Resources)
		s.nonces[resp.TypeUrl] = resp.Nonce
		if applyErr != nil {
			d.logf("NACK %s version %s: %v", resp.TypeUrl, resp.VersionInfo, applyErr)
		} else {
			s.versions[resp.TypeUrl] = resp.VersionInfo
			if err := st.acceptedSotW(s, prevRoutes); err != nil {
				return err
			}
		}
		if err := s.send(resp.TypeUrl, applyErr); err != nil {
			return err
		}
	}
}

// deltaStream is an incremental ADS stream: requests carry subscribe/unsubscribe changes, responses
// carry changed and removed resources, the client keeps the current set per type.
type deltaStream struct {
	s          discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node       *corev3.Node
	subscribed map[string][]string
}

func (s *deltaStream) send(req *discoveryv3.DeltaDiscoveryRequest) error {
	req.Node, s.node = s.node, nil
	return s.s.Send(req)
}

// subscribe declares the names of a type; nil is a wildcard subscription (the first request of a
// type with no names, as Envoy sends for CDS and LDS).
func (s *deltaStream) subscribe(typeURL string, names []string) error {
	old, known := s.subscribed[typeURL]
	s.subscribed[typeURL] = names
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL}
	for _, n := range names {
		if !slices.Contains(old, n) {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for _, n := range old {
		if !slices.Contains(names, n) {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
		}
	}
	if known && len(req.ResourceNamesSubscribe)+len(req.ResourceNamesUnsubscribe) == 0 {
		return nil
	}
	return s.send(req)
}

func (d *DataPlane) subscribeDelta(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := &deltaStream{s: stream, node: d.node(), subscribed: map[string][]string{}}
	st := &xdsState{cmInit: d.cmInit}
	current := map[string]map[string]*anypb.Any{}
	if err := s.subscribe(resourcev3.ClusterType, nil); err != nil {
		return err
	}
	responses := receive(ctx, stream.Recv)
	for {
		resp, err := nextResponse(ctx, responses, st, s)
		if err != nil {
			return err
		}
		next := maps.Clone(current[resp.TypeUrl])
		if next == nil {
			next = map[string]*anypb.Any{}
		}
		for _, r := range resp.Resources {
			next[r.Name] = r.Resource
		}
		for _, n := range resp.RemovedResources {
			delete(next, n)
		}
		var all []*anypb.Any
		for _, n := range slices.Sorted(maps.Keys(next)) {
			all = append(all, next[n])
		}
		prevRoutes := st.routeNames
		applyErr := d.apply(st, resp.TypeUrl, all)
		if applyErr != nil {
			d.logf("NACK %s version %s: %v", resp.TypeUrl, resp.SystemVersionInfo, applyErr)
		} else {
			current[resp.TypeUrl] = next
		}
		if err := s.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce, ErrorDetail: nackStatus(applyErr)}); err != nil {
			return err
		}
		if applyErr != nil {
			continue
		}
		if err := st.accepted(s, resp.TypeUrl, prevRoutes); err != nil {
			return err
		}
	}
}
