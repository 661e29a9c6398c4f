// Package xds turns the discovery Topology into the Envoy configuration that fronts the apiservers
// and serves it over ADS with go-control-plane.
//
// Translate is a pure function from a Topology to Envoy resources: one HTTPS listener whose filter
// chain strips client-supplied routing and identity headers, asks the ext_proc service where a request
// goes and routes by its answer; a route table that takes the cluster from wire.RouteHeader, else
// emits the rows of the Topology's decision table (decision.Table: skewed resource shapes, OpenAPI
// documents, discovery, schemas), else falls back to every upstream; and clusters per upstream, per capability set and for all upstreams, each
// with verified upstream TLS, the front-proxy client certificate, health checks and an HTTP/1.1 twin
// for upgrades. Every typed config is validated before it is packed into an Any.
//
// Server publishes a snapshot only when translation succeeded, keeps clusters that left the Topology
// for a grace period, and records which clusters every connected Envoy has acknowledged, so the
// ext_proc service never names a cluster an Envoy does not have yet (make-before-break). This package
// never talks to an apiserver; it only reads the Topology discovery publishes.
package xds
