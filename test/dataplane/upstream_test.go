package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// upstream is a plaintext HTTP/1.1 test apiserver: /readyz answers ready (200 by default), every
// other request is recorded and answered 200 with the upstream's name.
type upstream struct {
	name  string
	srv   *httptest.Server
	ready atomic.Int32
	mu    sync.Mutex
	reqs  []*http.Request
	hc    atomic.Int64
	body  atomic.Int64 // request body bytes received
}

func (u *upstream) bodyBytes() int64 { return u.body.Load() }

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{name: name}
	u.ready.Store(200)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			u.hc.Add(1)
			w.WriteHeader(int(u.ready.Load()))
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		u.body.Add(n)
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		u.mu.Unlock()
		w.Header().Set("X-Upstream", name)
		io.WriteString(w, name)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *upstream) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		return nil
	}
	return u.reqs[len(u.reqs)-1]
}

// routeTo is a prefix "/" route to a named cluster.
func routeTo(name, cluster string, headers ...*routev3.HeaderMatcher) *routev3.Route {
	return &routev3.Route{Name: name,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: headers},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}, Timeout: durationpb.New(0)}}}
}

// routeByHeader is a cluster_header route that requires the header to be present.
func routeByHeader(name, header string) *routev3.Route {
	return &routev3.Route{Name: name,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{present(header)}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: header}, Timeout: durationpb.New(0)}}}
}

func present(h string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: h, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
}

func exact(h, v string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: h, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}}}
}

func routes(rs ...*routev3.Route) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: rs}}}
}

// get sends GET path with the headers (name, value pairs) and returns status and body.
func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
