package wire

// IdentityRefusedHeader marks a request whose client certificate Envoy's Lua identity filter (the
// xds package's identity.lua) verified but cannot turn into exactly the identity the apiserver's own
// x509 authenticator would give it. The filter then sets no identity header, only this one, with one
// of IdentityRefusalReasons as value. ext_proc counts the refusal and answers it with a 503; when
// ext_proc does not answer (down, hanging, failed open), the Lua filter after it (identity_refusal.lua)
// answers the same 503. A client's own copy is removed before either filter runs (the listener's
// strip filter), and the route configuration removes it before forwarding.
const IdentityRefusedHeader = "x-skewgate-identity-refused"

// IdentityRefusalReasons are the values the identity filter sets in IdentityRefusedHeader, and the
// reason label of skewgate_identity_refused_total (any other value counts as "other").
var IdentityRefusalReasons = []string{
	"uid",        // a user UID attribute (OID 1.3.6.1.4.1.57683.2) that is not plain ASCII in a string type Go reads alike
	"subject",    // a subject the headers cannot carry exactly (an empty O, control bytes, leading or trailing blanks)
	"nouser",     // an empty CN and no Authorization header: directly the request would be anonymous
	"unverified", // a certificate Envoy did not report as validated (e.g. a resumed TLS session)
}

// IdentityRefusalOther is the reason label of a marker value not in IdentityRefusalReasons.
const IdentityRefusalOther = "other"
