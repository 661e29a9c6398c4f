package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/openapi"
)

// discoveryAccept asks for the upstream's LOCAL view first (profile=nopeer: a 1.36 server with the
// Mixed Version Proxy on would otherwise answer the peer-merged view), then v2, then v2beta1 for
// servers older than 1.30. client-go's discovery.AcceptV2NoPeer is the first entry.
const discoveryAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer," +
	"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," +
	"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

// Fetch error types, a bounded set (metric label values).
const (
	ErrConnect     = "connect"
	ErrStatus      = "status"
	ErrTooLarge    = "too_large"
	ErrContentType = "content_type"
	ErrDecode      = "decode"
	ErrInvalid     = "invalid"
)

// FetchError is a failed fetch with a type for metrics.
type FetchError struct {
	Type string
	Err  error
}

func (e *FetchError) Error() string { return e.Type + ": " + e.Err.Error() }
func (e *FetchError) Unwrap() error { return e.Err }

func fetchErr(typ string, format string, args ...any) error {
	return &FetchError{Type: typ, Err: fmt.Errorf(format, args...)}
}

// errorType returns the FetchError type of err, or "connect".
func errorType(err error) string {
	var fe *FetchError
	if errors.As(err, &fe) {
		return fe.Type
	}
	var oe *openapi.Error
	if errors.As(err, &oe) {
		return oe.Type
	}
	return ErrConnect
}

// fetcher talks to one upstream.
type fetcher struct {
	client     *http.Client
	noRedirect *http.Client // client, but a redirect is the answer
	base       string
	maxBytes   int64
}

// ServerName is the name every apiserver serving certificate carries (kubeadm: GetAPIServerAltNames
// in cmd/kubeadm/app/util/pkiutil; an apiserver's own self-signed certificate lists the service
// names), so each upstream's certificate is verified for it whatever its address.
const ServerName = "kubernetes.default.svc"

// newFetcher builds a client for the upstream at addr from base: same credentials and CA, host
// replaced, and the certificate verified for kubernetes.default.svc, which every apiserver serving
// certificate carries.
func newFetcher(base *rest.Config, addr string, maxBytes int64) (*fetcher, error) {
	cfg := rest.CopyConfig(base)
	cfg.Host = "https://" + addr
	cfg.APIPath = ""
	cfg.TLSClientConfig.ServerName = ServerName
	if cfg.TLSClientConfig.Insecure {
		return nil, errors.New("refusing an insecure TLS config: upstream certificates are always verified")
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	// OpenAPI documents are fetched without following redirects: a 301 for a document means the
	// index moved, and following it would fetch a document under a hash nobody checked.
	noRedirect := *client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &fetcher{client: client, noRedirect: &noRedirect, base: cfg.Host, maxBytes: maxBytes}, nil
}

func (f *fetcher) get(ctx context.Context, path string, header http.Header) (*http.Response, error) {
	return f.getWith(ctx, f.client, path, header)
}

func (f *fetcher) getWith(ctx context.Context, client *http.Client, path string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, &FetchError{Type: ErrConnect, Err: err}
	}
	return resp, nil
}

// readBody reads at most maxBytes; a larger body is an error, never a truncated document.
func (f *fetcher) readBody(resp *http.Response) ([]byte, error) {
	data, err := readLimited(resp, f.maxBytes)
	if errors.Is(err, errTooLong) {
		return nil, fetchErr(ErrTooLarge, "body larger than %d bytes", f.maxBytes)
	}
	return data, err
}

// readLimited reads at most limit bytes; more is errTooLong (the body is not read further).
func readLimited(resp *http.Response, limit int64) ([]byte, error) {
	if resp.ContentLength > limit {
		return nil, errTooLong
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &FetchError{Type: ErrConnect, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, errTooLong
	}
	return data, nil
}

var errTooLong = errors.New("body too long")

// drain reads what is left of a body the fetch does not use (at most 64 KiB), so the connection can
// be reused.
func drain(resp *http.Response) { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) }

// ready probes /readyz.
func (f *fetcher) ready(ctx context.Context) error {
	resp, err := f.get(ctx, "/readyz", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	drain(resp)
	if resp.StatusCode != http.StatusOK {
		return fetchErr(ErrStatus, "/readyz: %s", resp.Status)
	}
	return nil
}

// version fetches /version's gitVersion.
func (f *fetcher) version(ctx context.Context) (string, error) {
	resp, err := f.get(ctx, "/version", http.Header{"Accept": {"application/json"}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fetchErr(ErrStatus, "/version: %s", resp.Status)
	}
	data, err := f.readBody(resp)
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return "", fetchErr(ErrDecode, "/version: %v", err)
	}
	if len(v.GitVersion) > 64 {
		return "", fetchErr(ErrInvalid, "/version: gitVersion is %d bytes long", len(v.GitVersion))
	}
	return v.GitVersion, nil
}

// document fetches /api or /apis. With prev and its etag it asks If-None-Match and returns prev on
// 304 Not Modified.
func (f *fetcher) document(ctx context.Context, path string, prev *Document, etag string) (*Document, string, error) {
	h := http.Header{"Accept": {discoveryAccept}}
	if prev != nil && etag != "" {
		h.Set("If-None-Match", etag)
	}
	resp, err := f.get(ctx, path, h)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && prev != nil {
		return prev, etag, nil
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, "", fetchErr(ErrStatus, "%s: %s", path, resp.Status)
	}
	if err := checkDiscoveryContentType(resp.Header.Get("Content-Type")); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	data, err := f.readBody(resp)
	if err != nil {
		return nil, "", err
	}
	doc, err := ParseDocument(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return doc, resp.Header.Get("ETag"), nil
}

func checkDiscoveryContentType(ct string) error {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" || params["g"] != "apidiscovery.k8s.io" || params["as"] != "APIGroupDiscoveryList" ||
		(params["v"] != "v2" && params["v"] != "v2beta1") {
		return fetchErr(ErrContentType, "content type %q is not aggregated discovery (apiservers before 1.26 are not supported)", ct)
	}
	return nil
}

// ParseDocument decodes and validates an aggregated discovery list (v2 and v2beta1 share their JSON
// shape). A document with anything that cannot be a group, version or resource name is rejected
// whole: a half-understood document must not change routing.
func ParseDocument(data []byte) (*Document, error) {
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fetchErr(ErrDecode, "%v", err)
	}
	if list.Kind != "APIGroupDiscoveryList" || !strings.HasPrefix(list.APIVersion, "apidiscovery.k8s.io/") {
		return nil, fetchErr(ErrInvalid, "kind %q apiVersion %q, want APIGroupDiscoveryList", list.Kind, list.APIVersion)
	}
	for _, g := range list.Items {
		if g.Name != "" && len(validation.IsDNS1123Subdomain(g.Name)) > 0 {
			return nil, fetchErr(ErrInvalid, "bad group name %q", g.Name)
		}
		for _, v := range g.Versions {
			if len(validation.IsDNS1035Label(v.Version)) > 0 {
				return nil, fetchErr(ErrInvalid, "group %q: bad version %q", g.Name, v.Version)
			}
			for _, r := range v.Resources {
				if !validPathSegment(r.Resource) {
					return nil, fetchErr(ErrInvalid, "%s/%s: bad resource %q", g.Name, v.Version, r.Resource)
				}
				for _, s := range r.Subresources {
					if !validPathSegment(s.Subresource) {
						return nil, fetchErr(ErrInvalid, "%s/%s/%s: bad subresource %q", g.Name, v.Version, r.Resource, s.Subresource)
					}
				}
			}
		}
	}
	sum := sha256.Sum256(data)
	return &Document{Groups: list.Items, Hash: hex.EncodeToString(sum[:])}, nil
}

// validPathSegment accepts what a resource or subresource name can be in a request path.
func validPathSegment(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
