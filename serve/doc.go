// Package serve runs skewgate's control plane in one process (`skewgate serve`): discovery, the xDS
// server, the ext_proc server and an HTTP endpoint for health, metrics and the Topology. It is the
// composition root: it converts serve/options into each part's configuration and wires the one flow
// discovery -> xds -> extproc (ext_proc reads only the Topology xds says every Envoy has
// acknowledged). cmd/skewgate only parses flags into options.Options; tests call Start with
// listeners they opened. Nothing below it imports it.
package serve
