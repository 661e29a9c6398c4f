// Package decision is where a request is decided. discovery's Build compiles each Topology's
// decisions once into a Table: ordered rows of request shape (path shape, verb; every credential
// and, where a row says so, upgrades) -> decision (a set of apiservers, 503, served at the front, or
// the default route). ext_proc answers each request from it (Table.Decide, after Classify, which
// mirrors k8s.io/apiserver's RequestInfo), and xds emits Envoy's route table from its rows, so that
// failing open Envoy keeps the decision ext_proc would have made; test/equivalence guards the
// emitter. The package knows no Envoy types and does no I/O; only the cluster names of
// internal/wire cross into it.
package decision
