// Package discovery learns which kube-apiservers exist (identity Leases in kube-system and statically
// configured upstreams, filtered by an address policy), what each one serves (its own aggregated
// discovery, profile=nopeer) and whether it is ready, and publishes all of it as one immutable,
// versioned Topology.
//
// It is the only writer of the Topology and the only part of skewgate that talks to apiservers. It
// rebuilds the whole Topology from informer listers and fetched documents on every change instead of
// patching it (k8s.io/apiserver pkg/util/peerproxy keeps the same one-writer rule). It knows nothing
// of Envoy: a decision names a set of upstreams (SetID), and the contract package internal/wire
// names the Envoy clusters for them.
package discovery
