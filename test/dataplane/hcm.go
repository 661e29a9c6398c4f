package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

var discardLog = log.New(io.Discard, "", 0)

// internalAddresses is the HCM's internal_address_config (InternalAddressConfig::isInternalAddress,
// source/extensions/filters/network/http_connection_manager/config.h): a pipe peer is internal iff
// unix_sockets; with cidr_ranges an IP peer is internal iff it is in one of them; with the field set
// but cidr_ranges empty Envoy falls back to Network::Utility::isInternalAddress
// (source/common/network/utility.cc): 10/8, 172.16/12, 192.168/16, exactly 127.0.0.1, fd00::/8 and
// exactly ::1 (the code tests the first byte for 0xfd, not the fc00::/7 its comment names). Without
// the field no peer is internal: the RFC1918 default sat behind the runtime guard
// envoy.reloadable_features.explicit_internal_address_config (config.cc
// createInternalAddressConfig), which 1.36.0 removed with its legacy path (changelogs/1.36.0.yaml).
type internalAddresses struct {
	set    bool
	unix   bool
	ranges []netip.Prefix
}

// envoyDefaultInternal is Network::Utility::isInternalAddress as prefixes.
var envoyDefaultInternal = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128"),
}

func newInternalAddresses(c *hcmv3.HttpConnectionManager_InternalAddressConfig) (*internalAddresses, error) {
	if c == nil {
		return &internalAddresses{}, nil
	}
	ia := &internalAddresses{set: true, unix: c.GetUnixSockets()}
	for _, r := range c.GetCidrRanges() {
		a, err := netip.ParseAddr(r.AddressPrefix)
		if err != nil {
			return nil, err
		}
		p, err := a.Prefix(int(r.GetPrefixLen().GetValue()))
		if err != nil {
			return nil, err
		}
		ia.ranges = append(ia.ranges, p)
	}
	if len(ia.ranges) == 0 {
		ia.ranges = envoyDefaultInternal
	}
	return ia, nil
}

func (ia *internalAddresses) internal(remote string) bool {
	if !ia.set {
		return false
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return ia.unix && (strings.HasPrefix(remote, "@") || strings.HasPrefix(remote, "/"))
	}
	// A v4-mapped peer on a dual-stack socket is an IPv4 address to Envoy
	// (Address::addressFromSockAddr with v6only false).
	for _, p := range ia.ranges {
		if p.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// rejectUnderscores applies headers_with_underscores_action (config/core/v3 protocol.proto,
// enforced by the codecs): REJECT_REQUEST answers 400 and closes the connection on HTTP/1
// (http1/codec_impl.cc) and resets the stream on HTTP/2 (http2/codec_impl.cc); DROP_HEADER drops
// such headers; ALLOW (the default) keeps them. It returns false when the request ended.
func rejectUnderscores(w http.ResponseWriter, r *http.Request, hcm *hcmv3.HttpConnectionManager) bool {
	action := hcm.GetCommonHttpProtocolOptions().GetHeadersWithUnderscoresAction()
	if action == corev3.HttpProtocolOptions_ALLOW {
		return true
	}
	for k := range r.Header {
		if !strings.Contains(k, "_") {
			continue
		}
		if action == corev3.HttpProtocolOptions_DROP_HEADER {
			r.Header.Del(k)
			continue
		}
		if r.ProtoMajor >= 2 {
			panic(http.ErrAbortHandler) // RST_STREAM
		}
		w.Header().Set("Connection", "close")
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return false
	}
	return true
}

// mutateRequestHeaders is ConnectionManagerUtility::mutateRequestHeaders as far as skewgate's
// config reaches (source/common/http/conn_manager_utility.cc): with use_remote_address the peer is
// appended to X-Forwarded-For (the listener's own address for a loopback peer), and x-forwarded-proto
// is set; the request is internal only if it had no XFF before and the peer is an internal address;
// for every other request the x-envoy-* control headers and the route configuration's
// internal_only_headers are removed, before the route is selected. Then XFCC.
func (d *DataPlane) mutateRequestHeaders(r *http.Request, ch *chain, internalOnly []string) {
	hcm := ch.hcm
	internal := false
	if hcm.GetUseRemoteAddress().GetValue() {
		_, hadXFF := r.Header["X-Forwarded-For"]
		peer := r.RemoteAddr
		appended := peer
		if ap, err := netip.ParseAddrPort(peer); err == nil {
			appended = ap.Addr().String()
			if ap.Addr().IsLoopback() {
				if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
					if lap, err := netip.ParseAddrPort(la.String()); err == nil {
						appended = lap.Addr().String()
					}
				}
			}
		}
		if prev := r.Header.Values("X-Forwarded-For"); len(prev) > 0 {
			r.Header.Set("X-Forwarded-For", strings.Join(prev, ",")+","+appended)
		} else {
			r.Header.Set("X-Forwarded-For", appended)
		}
		r.Header.Set("X-Forwarded-Proto", "https")
		internal = !hadXFF && ch.internal.internal(peer)
	}
	if internal {
		r.Header.Set("X-Envoy-Internal", "true")
	} else {
		r.Header.Del("X-Envoy-Internal")
		for k := range r.Header {
			if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-envoy-") && envoyControlHeaders[lk] {
				r.Header.Del(k)
			}
		}
		for _, h := range internalOnly {
			r.Header.Del(h)
		}
	}
	d.mutateXFCC(r, hcm)
}

// envoyControlHeaders are the x-envoy-* request headers cleaned from external requests.
var envoyControlHeaders = map[string]bool{
	"x-envoy-decorator-operation": true, "x-envoy-downstream-service-cluster": true, "x-envoy-downstream-service-node": true,
	"x-envoy-retriable-status-codes": true, "x-envoy-retriable-header-names": true, "x-envoy-retry-on": true,
	"x-envoy-retry-grpc-on": true, "x-envoy-max-retries": true, "x-envoy-upstream-alt-stat-name": true,
	"x-envoy-upstream-rq-timeout-ms": true, "x-envoy-upstream-rq-per-try-timeout-ms": true,
	"x-envoy-upstream-rq-timeout-alt-response": true, "x-envoy-expected-rq-timeout-ms": true, "x-envoy-force-trace": true,
	"x-envoy-ip-tags": true, "x-envoy-original-url": true, "x-envoy-hedge-on-per-try-timeout": true,
}

// mutateXFCC is mutateXfccRequestHeader for SANITIZE and SANITIZE_SET: the client's header is
// removed unless the peer presented a (verified) certificate; with SANITIZE_SET it is replaced by
// Hash=<sha256 of the DER>[;Cert="<url-encoded PEM>"].
func (d *DataPlane) mutateXFCC(r *http.Request, hcm *hcmv3.HttpConnectionManager) {
	switch hcm.ForwardClientCertDetails {
	case hcmv3.HttpConnectionManager_SANITIZE:
		r.Header.Del("X-Forwarded-Client-Cert")
	case hcmv3.HttpConnectionManager_SANITIZE_SET:
		r.Header.Del("X-Forwarded-Client-Cert")
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return
		}
		leaf := r.TLS.PeerCertificates[0]
		sum := sha256.Sum256(leaf.Raw)
		v := "Hash=" + hex.EncodeToString(sum[:])
		if hcm.GetSetCurrentClientCertDetails().GetCert() {
			v += `;Cert="` + urlEncodePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})) + `"`
		}
		r.Header.Set("X-Forwarded-Client-Cert", v)
	}
}

// urlEncodePEM escapes a PEM block the way Envoy writes the XFCC Cert field
// (Ssl::ConnectionInfo::urlEncodedPemEncodedPeerCertificate).
func urlEncodePEM(p []byte) string {
	return strings.NewReplacer("\n", "%0A", " ", "%20", "+", "%2B", "/", "%2F", "=", "%3D").Replace(string(p))
}
