-- skewgate identity: the request's identity from the client certificate Envoy verified, set as the
-- headers the apiserver's request-header authenticator reads, inside Envoy with no external call.
--
-- It is the apiserver's own x509 mapping (k8s.io/apiserver request/x509 CommonNameUserConversion):
-- the subject's last CN is the user (an empty one: no certificate identity), every O a group in
-- order, the one UID attribute (OID 1.3.6.1.4.1.57683.2) the UID (two, or an empty one: 401), and
-- the extra authentication.kubernetes.io/credential-id is X509SHA256=<hex of the certificate's
-- SHA-256>. What the headers cannot carry exactly (an empty O, control characters, leading or
-- trailing blanks, a UID that is not plain ASCII; an empty CN without a token, which directly would
-- be anonymous) is refused, never sent on with less or different identity: the script sets no
-- identity header, only the marker x-skewgate-identity-refused: <reason>, which ext_proc counts
-- (skewgate_identity_refused_total) and answers with a 503 and Retry-After, and which the Lua filter
-- after ext_proc (identity_refusal.lua) answers the same way when ext_proc does not. The filter before this one removed every client copy
-- of these headers; this script only adds them, after everything was derived, and never touches
-- Authorization.
--
-- Envoy API used (source read in Envoy's main copies; see test/dataplane/CONFORMANCE.md):
--   streamInfo():downstreamSslConnection()     nil without TLS (filters/common/lua/wrappers.cc)
--   peerCertificatePresented()/Validated()      Validated is false on a resumed TLS session
--   subjectPeerCertificate()                   X509_NAME_print_ex(XN_FLAG_RFC2253) (tls/utility.cc)
--   sha256PeerCertificateDigest()              lowercase hex
--   headers():get()/add(), respond()           respond is sendLocalReply (lua_filter.cc)
-- A Lua error lets the request continue with the headers added so far (Filter::scriptError), so
-- the derivation runs under pcall and an error is answered 503.

local UID_OID = "1.3.6.1.4.1.57683.2"
local REFUSED = "x-skewgate-identity-refused"
-- Whether every apiserver reads X-Remote-Uid (--requestheader-uid-headers); the xds package turns it
-- on with --forward-certificate-uid. An apiserver without that flag drops the header silently, so
-- without it a certificate's UID is refused rather than lost.
local FORWARD_UID = false
local CREDENTIAL_ID = "x-remote-extra-authentication.kubernetes.io%2fcredential-id"

local function status(handle, code, reason, message)
  local headers = {
    [":status"] = tostring(code),
    ["content-type"] = "application/json",
    ["cache-control"] = "no-cache, private",
  }
  handle:respond(headers, '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"'
    .. message .. '","reason":"' .. reason .. '","code":' .. code .. '}\n')
end

-- parse reads BoringSSL's RFC 2253 form back into attributes in certificate (DER) order. The
-- printer (do_name_ex, a_strex.cc) writes the entries last first, ',' between RDNs and '+' inside
-- one, escapes ',' '+' '"' '\' '<' '>' ';' and a leading ' ' or '#' and a trailing ' ' as \c, and
-- every control byte and byte above 0x7f of the UTF-8 value as \XX; an unknown attribute type is
-- its dotted OID and its value '#' and the hex of its DER. So the unescaped ',' and '+' are the
-- separators and the form is lossless.
local function parse(s)
  local out = {}
  local i, n = 1, #s
  if n == 0 then
    return out
  end
  while true do
    local eq = string.find(s, "=", i, true)
    if eq == nil then
      error("subject without '='")
    end
    local attr = { type = string.sub(s, i, eq - 1), dump = string.sub(s, eq + 1, eq + 1) == "#" }
    local j = attr.dump and eq + 2 or eq + 1
    local buf = {}
    while j <= n do
      local k = string.find(s, "[,+\\]", j)
      if k == nil then
        buf[#buf + 1] = string.sub(s, j)
        j = n + 1
        break
      end
      buf[#buf + 1] = string.sub(s, j, k - 1)
      j = k
      if string.sub(s, k, k) ~= "\\" then
        break
      end
      local hex = string.match(s, "^%x%x", k + 1)
      if hex then
        buf[#buf + 1] = string.char(tonumber(hex, 16))
        j = k + 3
      elseif k < n then
        buf[#buf + 1] = string.sub(s, k + 1, k + 1)
        j = k + 2
      else
        error("subject ends in an escape")
      end
    end
    attr.value = table.concat(buf)
    table.insert(out, 1, attr)
    if j > n then
      return out
    end
    i = j + 1
  end
end

-- header checks that a value arrives as it is: no control byte (the codecs refuse CR, LF and NUL;
-- the others are not carried reliably) and no leading or trailing blank (HTTP trims them).
local function header(v)
  return string.find(v, "[%z\1-\31\127]") == nil and string.find(v, "^[ \t]") == nil
    and string.find(v, "[ \t]$") == nil
end

-- der reads the UID attribute's DER string: one of the string types Go's parser accepts with
-- content Go would read the same, printable ASCII only. nil: not decodable reliably.
local function der(hex)
  if #hex % 2 ~= 0 or string.find(hex, "[^%x]") then
    return nil
  end
  local b = {}
  for k = 1, #hex, 2 do
    b[#b + 1] = tonumber(string.sub(hex, k, k + 1), 16)
  end
  local tag, len, at = b[1], b[2], 3
  if len == nil then
    return nil
  elseif len == 0x81 and b[3] and b[3] >= 0x80 then
    len, at = b[3], 4
  elseif len == 0x82 and b[3] and b[4] and b[3] > 0 then
    len, at = b[3] * 256 + b[4], 5
  elseif len >= 0x80 then
    return nil
  end
  if #b - at + 1 ~= len then
    return nil
  end
  local chars = {}
  for k = at, #b do
    local c = b[k]
    if c < 0x20 or c > 0x7e then
      return nil
    end
    chars[#chars + 1] = string.char(c)
  end
  local v = table.concat(chars)
  if tag == 0x0C or tag == 0x16 then -- UTF8String, IA5String
    return v
  elseif tag == 0x13 and not string.find(v, "[^%w '()+,%-./:=?*&]") then -- PrintableString
    return v
  elseif tag == 0x12 and not string.find(v, "[^%d ]") then -- NumericString
    return v
  end
  return nil
end

-- derive returns the identity, or a refusal: {code = 503, reason = ...} or {code = 401}, or nil for
-- no certificate identity.
local function derive(ssl)
  local attrs = parse(ssl:subjectPeerCertificate())
  local cn
  local groups, uids = {}, {}
  for _, a in ipairs(attrs) do
    if a.type == "CN" then
      cn = a
    elseif a.type == "O" then
      groups[#groups + 1] = a
    elseif a.type == UID_OID then
      uids[#uids + 1] = a
    end
  end
  if cn == nil or (cn.value == "" and not cn.dump) then
    return nil
  end
  if cn.dump or not header(cn.value) then
    return { code = 503, reason = "subject" }
  end
  local id = { user = cn.value, groups = {} }
  for _, o in ipairs(groups) do
    if o.dump or o.value == "" or not header(o.value) then
      return { code = 503, reason = "subject" }
    end
    id.groups[#id.groups + 1] = o.value
  end
  if #uids > 1 then
    return { code = 401 }
  elseif #uids == 1 then
    local uid = uids[1].dump and der(uids[1].value)
    if uid == nil or (uid ~= "" and not header(uid)) then
      return { code = 503, reason = "uid" }
    elseif uid == "" then
      return { code = 401 }
    elseif not FORWARD_UID then
      return { code = 503, reason = "uid" }
    end
    id.uid = uid
  end
  local digest = ssl:sha256PeerCertificateDigest()
  if string.find(digest, "^%x+$") == nil or #digest ~= 64 then
    return { code = 503, reason = "subject" }
  end
  id.credential = "X509SHA256=" .. string.lower(digest)
  return id
end

function envoy_on_request(handle)
  local ssl = handle:streamInfo():downstreamSslConnection()
  if ssl == nil or not ssl:peerCertificatePresented() then
    return
  end
  local headers = handle:headers()
  if not ssl:peerCertificateValidated() then
    -- A resumed TLS session: Envoy does not validate again and reports false (the listener resumes
    -- none; this is the guard should one be resumed anyway).
    headers:add(REFUSED, "unverified")
    return
  end
  local ok, id = pcall(derive, ssl)
  if not ok then
    headers:add(REFUSED, "subject")
    return
  end
  if id == nil then
    -- No certificate identity (no or an empty CN): directly, the apiserver tries a token, else the
    -- request is anonymous. Through the front-proxy certificate with no X-Remote-User it would be
    -- 401, so without a token it is refused rather than answered differently.
    if headers:get("authorization") == nil then
      headers:add(REFUSED, "nouser")
    end
    return
  end
  if id.code == 401 then
    -- The apiserver's x509 authenticator fails; a bearer token would still be tried after it.
    if headers:get("authorization") == nil then
      status(handle, 401, "Unauthorized", "Unauthorized")
    end
    return
  elseif id.code == 503 then
    headers:add(REFUSED, id.reason)
    return
  end
  headers:add("x-remote-user", id.user)
  if id.uid then
    headers:add("x-remote-uid", id.uid)
  end
  for _, g in ipairs(id.groups) do
    headers:add("x-remote-group", g)
  end
  headers:add(CREDENTIAL_ID, id.credential)
end
