// Package kubesvc owns the endpoints of the default/kubernetes Service when the operator turns the
// mode on (`skewgate serve --kubernetes-endpoints`), so that in-cluster clients reach the fronts
// instead of the apiservers. It is modelled on the apiserver's own lease endpoint reconciler
// (k8s.io/kubernetes pkg/controlplane/reconcilers/lease.go): each member (a node's skewgate with its
// front) heartbeats a Lease in the skewgate namespace while it is live, every member writes the whole
// live set, never an empty one, and a stopping member removes itself first. With no live member it
// publishes the ready apiservers' own addresses, so the Service is never worse off than without it.
// It writes exactly two objects, Endpoints and EndpointSlice default/kubernetes, and its own Lease;
// it creates neither of the two (they exist wherever the apiservers' reconciler ran) and never
// fights another writer: a rival is logged, counted and waited out with a growing backoff. It reads
// the Topology discovery publishes and never talks to an apiserver's discovery itself.
package kubesvc
