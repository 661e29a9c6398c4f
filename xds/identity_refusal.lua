-- skewgate identity refusal: runs after ext_proc. The identity filter marked a request whose
-- certificate's identity it cannot derive exactly (x-skewgate-identity-refused, set by no one else:
-- the strip filter removed any client copy). ext_proc answers such a request itself (and counts it);
-- this answers it when ext_proc did not: down, hanging past its message timeout, failed open.
function envoy_on_request(handle)
  local reason = handle:headers():get("x-skewgate-identity-refused")
  if reason == nil then
    return
  end
  handle:respond({
    [":status"] = "503",
    ["content-type"] = "application/json",
    ["retry-after"] = "1",
  }, '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"ServiceUnavailable","code":503,"message":"the front cannot derive this client certificate\'s identity exactly; it was not sent, use an apiserver directly"}')
end
