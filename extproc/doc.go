// Package extproc is the Envoy ext_proc service (envoy.service.ext_proc.v3.ExternalProcessor): for
// each request Envoy sends the request headers, and the service answers from the Topology's decision
// table (decision.Table.Decide, the table xds emits Envoy's route table from) which cluster serves
// it (a header mutation of wire.RouteHeader plus clear_route_cache; every decision names a
// cluster), or a 503 when the capable apiservers are all unavailable. Requests without credentials go to the
// anonymous twin clusters with no identity asserted.
//
// Discovery (/api, /apis and below) is answered from the merged documents, but only after an
// apiserver has authorized the request: the service asks Envoy for the upstream's response headers
// (mode_override) and replaces an authorized answer with the merged one (discoveryauth.go). OpenAPI
// v3 is decided per document key (a row of the table): routed to the apiservers that publish the document
// the front's index names, or, for the front's index and merged documents, served the same way, with
// kube-openapi's handler3 semantics (openapi.Front, through openapiserve.go).
//
// It reads the current Topology through a narrow interface and never talks to an apiserver. The
// ext_proc stream protocol stays inside this package; only a small routing decision crosses into it.
package extproc
