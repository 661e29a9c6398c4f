package xds

import _ "embed"

// IdentityScript is the Lua filter's code that sets a request's identity from the verified client
// certificate inside Envoy (identity.lua). The test data plane runs the same text.
//
//go:embed identity.lua
var IdentityScript string
