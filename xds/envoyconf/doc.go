// Package envoyconf builds the Envoy configuration that needs no Topology: the bootstrap an Envoy
// starts from (`skewgate bootstrap`, `skewgate kubeadm install`) and the pieces it shares with the
// translation in xds (gRPC clusters, file-backed secrets, addresses, validated packing). It is a
// leaf: it imports no runtime package, so the installer renders the bootstrap without linking the
// control plane.
package envoyconf
