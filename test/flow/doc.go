// Package flow holds the tests that cross the parts of the flow discovery -> xds -> extproc (and the
// options serve parses for them): each part's own tests stay in its package and import no other
// part, so a test here is where two parts are held to each other. The scenarios that need real etcd
// and kube-apiservers (the testbed) are here too, through each part's public API only: no part's
// unit tests start the testbed. They skip under -short.
package flow
