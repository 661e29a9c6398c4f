// Package extproc is the Envoy ext_proc service (envoy.service.ext_proc.v3.ExternalProcessor): for
// each request Envoy sends the request headers (header-only mode), and the service answers which
// cluster serves it (a header mutation of wire.RouteHeader plus clear_route_cache), or a 503 when the
// capable apiservers are all unavailable.
//
// It reads the current Topology through a narrow interface and never talks to an apiserver. The
// ext_proc stream protocol stays inside this package; only a small routing decision crosses into it.
package extproc
