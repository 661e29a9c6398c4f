// Package incluster holds the end-to-end tests of in-cluster clients: a client-go client configured
// the way rest.InClusterConfig configures one (https://10.96.0.1:443, a service-account token, the
// cluster CA) reaches the apiservers through the `default/kubernetes` Service, programmed by the real
// kube-proxy (iptables mode) from the `kubernetes` EndpointSlice.
//
// TestInClusterClientsToday measures the wrong 404s such a client meets today, with the Service's
// endpoints the apiservers' own; TestInClusterClientsThroughFronts turns on the kubernetes-endpoints
// mode (`skewgate serve --kubernetes-endpoints` on every co-located node, apiservers on
// --endpoint-reconciler-type=none) and measures the same client through the fronts, then a node
// killed, a rival writer and every skewgate stopped.
//
// Its tests run inside a network namespace of their own (test/netns, from TestMain): the EndpointSlice
// needs real, non-loopback addresses and kube-proxy rewrites the namespace's nat table. That is why
// they live apart from test/e2e, whose tests run on the host's loopback. The package has no non-test
// code.
package incluster
