// Package testbed runs a real control plane on one machine for skewgate's integration tests and demo:
// one etcd and any number of kube-apiservers of chosen versions, each in its own UTS namespace (so each
// has its own hostname and therefore its own identity Lease) on its own loopback address, or, with
// Config.Network inside a network namespace of the test's own (test/netns), on a real /24 with the
// apiservers' lease endpoint reconciler on; there it also runs the real kube-proxy (StartKubeProxy).
//
// It owns the processes it starts and their PKI; it knows nothing about skewgate. Binaries come from
// `make testbed-bins` (hack/testbed-bins.sh), found through $SKEWGATE_TESTBED_BIN or the repository's
// .testbed/bin folder. Every child runs with a parent-death signal, so a test that panics or times out
// never leaves an apiserver behind.
package testbed
