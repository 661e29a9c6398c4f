-- skewgate identity: the request's identity from the client certificate Envoy verified, set as the
-- headers the apiserver's request-header authenticator reads, inside Envoy and with no external call.
-- It is the apiserver's own x509 mapping (k8s.io/apiserver/pkg/authentication/request/x509,
-- CommonNameUserConversion): the subject's CN is the user, each O a group, the UID attribute
-- (OID 1.3.6.1.4.1.57683.2) the UID, and the extra authentication.kubernetes.io/credential-id is
-- X509SHA256=<hex of the certificate's SHA-256>. A certificate whose identity this script cannot derive
-- exactly is refused with a 503 and Retry-After, never sent on with less or different identity.
-- Client copies of every X-Remote-* header were removed by the filter before this one.
-- DRAFT: the rules for several CNs, the UID attribute and escapes are being settled.

local USER = "x-remote-user"
local GROUP = "x-remote-group"
local UID = "x-remote-uid"
local CREDENTIAL_ID = "x-remote-extra-authentication.kubernetes.io%2fcredential-id"
local UID_OID = "1.3.6.1.4.1.57683.2"

local function refuse(handle, message)
  handle:respond({
    [":status"] = "503",
    ["content-type"] = "application/json",
    ["retry-after"] = "1",
  }, '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"ServiceUnavailable","code":503,"message":"' .. message .. '"}')
end

function envoy_on_request(handle)
  local ssl = handle:streamInfo():downstreamSslConnection()
  if ssl == nil or not ssl:peerCertificatePresented() then
    return
  end
  if not ssl:peerCertificateValidated() then
    return
  end
  local subject = ssl:subjectPeerCertificate()
  if string.find(subject, UID_OID, 1, true) ~= nil then
    refuse(handle, "the front cannot yet read the UID of this client certificate; retry against an apiserver directly")
    return
  end
  local parsed = ssl:parsedSubjectPeerCertificate()
  if parsed == nil then
    return
  end
  local cn = parsed:commonName()
  if cn == nil or cn == "" then
    return
  end
  local headers = handle:headers()
  headers:replace(USER, cn)
  for _, o in ipairs(parsed:organizationName()) do
    headers:add(GROUP, o)
  end
  headers:replace(CREDENTIAL_ID, "X509SHA256=" .. ssl:sha256PeerCertificateDigest())
end
