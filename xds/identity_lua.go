package xds

import (
	_ "embed"
	"strings"
)

// IdentityScript is the Lua filter's code that sets a request's identity from the verified client
// certificate inside Envoy (identity.lua), as emitted without Options.ForwardCertificateUID. The
// test data plane runs the same text.
//
//go:embed identity.lua
var IdentityScript string

// uidLine is the line of identity.lua that IdentityScriptFor turns on.
const uidLine = "local FORWARD_UID = false\n"

// IdentityScriptFor is identity.lua as the listener emits it: with forwardUID, a certificate's UID
// attribute is forwarded as X-Remote-Uid; without, a certificate with one is refused.
func IdentityScriptFor(forwardUID bool) string {
	if !forwardUID {
		return IdentityScript
	}
	return strings.Replace(IdentityScript, uidLine, "local FORWARD_UID = true\n", 1)
}
