// Package netns runs a test binary inside its own network namespace, so end-to-end tests can use
// real, non-loopback addresses (an EndpointSlice refuses loopback ones) and let kube-proxy program
// iptables without touching the host: every packet stays inside the namespace.
//
// A package opts in from its TestMain with Main. The first run re-executes the test binary itself under
// `unshare --net` with the same arguments and Marker set, and exits with the child's code; the child
// brings lo up, makes Subnet local on lo and routes ServiceCIDR through it, so a packet to a ClusterIP
// leaves through the local stack, where kube-proxy's OUTPUT DNAT rules rewrite it. The package owns
// that namespace's setup only; it knows nothing about Kubernetes or skewgate.
package netns
