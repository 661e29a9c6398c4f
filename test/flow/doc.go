// Package flow holds the tests that cross the parts of the flow discovery -> xds -> extproc (and the
// options serve parses for them): each part's own tests stay in its package and import no other
// part, so a test here is where two parts are held to each other. Tests that start the testbed
// (real etcd and kube-apiservers) skip under -short.
package flow
