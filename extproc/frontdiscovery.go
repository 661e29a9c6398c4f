package extproc

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/sync/singleflight"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	apidiscoveryv2conversion "k8s.io/apiserver/pkg/apis/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	clientdiscovery "k8s.io/client-go/discovery"

	"github.com/skewgate/skewgate/discovery"
)

// discoveryCodecs serialize what an apiserver's discovery endpoints serve: aggregated discovery
// (v2, and v2beta1 by conversion) and the legacy unversioned lists, in JSON, YAML and protobuf. This
// mirrors aggregated.NewResourceManager and the legacy handlers in k8s.io/apiserver
// pkg/endpoints/discovery.
var discoveryCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(scheme))
	utilruntime.Must(apidiscoveryv2beta1.AddToScheme(scheme))
	utilruntime.Must(apidiscoveryv2conversion.RegisterConversions(scheme))
	scheme.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	return serializer.NewCodecFactory(scheme)
}()

// maxCacheBytes bounds the bytes of serialized answers one Topology's cache holds. The keys are
// already bounded (paths the Topology serves times the few negotiated variants of each), so this only
// matters for very large documents: an answer that does not fit is built per request instead.
const maxCacheBytes = 64 << 20

// cacheKey is what an answer depends on: the path and the NEGOTIATED representation, never the raw
// Accept header. Any number of distinct Accept headers that negotiate the same representation share
// one entry, so a client cannot grow the cache by varying the header.
type cacheKey struct {
	path string
	// mediaType is the serializer's media type ("" when nothing acceptable was offered: the 406).
	mediaType string
	// convert is the aggregated discovery GVK asked for (zero for the legacy documents).
	convert schema.GroupVersionKind
	pretty  bool
}

// String is the key as one string, for the single flight of its build.
func (k cacheKey) String() string {
	return fmt.Sprintf("%q %q %s %t", k.path, k.mediaType, k.convert, k.pretty)
}

// accept is the canonical Accept header that negotiates exactly k: the answer is built from it, so
// it is a function of the key alone.
func (k cacheKey) accept() string {
	if k.mediaType == "" {
		return "application/x-skewgate-unacceptable"
	}
	a := k.mediaType
	if !k.convert.Empty() {
		a += ";g=" + k.convert.Group + ";v=" + k.convert.Version + ";as=" + k.convert.Kind
	}
	if k.pretty {
		a += ";pretty=1"
	}
	return a
}

// negotiatedKey negotiates accept the way the handler that answers path will (restrictions) and
// returns the representation it picks.
func negotiatedKey(path, accept string, restrictions negotiation.EndpointRestrictions) cacheKey {
	k := cacheKey{path: path}
	mt, ok := negotiation.NegotiateMediaTypeOptions(accept, discoveryCodecs.SupportedMediaTypes(), restrictions)
	if !ok {
		return k
	}
	k.mediaType = mt.Accepted.MediaType
	// Pretty changes the bytes only where the serializer has a pretty form (JSON).
	k.pretty = mt.Pretty && mt.Accepted.PrettySerializer != nil
	if mt.Convert != nil {
		k.convert = *mt.Convert
	}
	return k
}

// cachedResponse holds the finished answers for one path and representation: built once per
// Topology, shared read-only by every request (gRPC only marshals them).
type cachedResponse struct {
	full *extprocv3.ProcessingResponse
	// etag and notModified are set for a 200 with an ETag: If-None-Match with it gets the 304.
	etag        string
	notModified *extprocv3.ProcessingResponse
	size        int // bytes charged to the cache: the body plus a little for headers
}

// frontDiscovery serves one Topology's merged discovery, the way an apiserver serves its own.
type frontDiscovery struct {
	api, apis discovery.MergedDiscovery
	legacy    *metav1.APIGroupList
	resources map[schema.GroupVersion]*metav1.APIResourceList
	groups    map[string]*metav1.APIGroup

	mu         sync.Mutex
	cache      map[cacheKey]*cachedResponse
	cacheBytes int
	maxBytes   int
	builds     singleflight.Group // by cacheKey.String(): one build at a time per representation
}

func newFrontDiscovery(t *discovery.Topology) *frontDiscovery {
	f := &frontDiscovery{api: t.API, apis: t.APIs, cache: map[cacheKey]*cachedResponse{},
		maxBytes: maxCacheBytes, groups: map[string]*metav1.APIGroup{}}
	var coreRes map[schema.GroupVersion]*metav1.APIResourceList
	f.legacy, f.resources, _ = clientdiscovery.SplitGroupsAndResources(t.APIs.List)
	_, coreRes, _ = clientdiscovery.SplitGroupsAndResources(t.API.List)
	for gv, l := range coreRes {
		f.resources[gv] = l
	}
	for i := range f.legacy.Groups {
		f.groups[f.legacy.Groups[i].Name] = &f.legacy.Groups[i]
	}
	f.legacy.Kind, f.legacy.APIVersion = "APIGroupList", "v1"
	return f
}

// discoveryFor returns the front discovery of t, built once per Topology version.
func (s *Server) discoveryFor(t *discovery.Topology) *frontDiscovery {
	return s.frontDiscovery.get(t, newFrontDiscovery)
}

// serve answers a discovery request from the merged documents, or returns nil to let it pass to an
// apiserver: plan, then answer, as one call.
func (f *frontDiscovery) serve(method, path, accept, ifNoneMatch string) *extprocv3.ProcessingResponse {
	p := f.plan(method, path)
	if p == nil {
		return nil
	}
	return p.answer(accept, ifNoneMatch)
}

// discoveryPlan is a discovery path the front answers; what it answers depends on the request's
// Accept and If-None-Match, read only once an apiserver authorized the request.
type discoveryPlan struct {
	f *frontDiscovery
	// path is the path without its query; top is "api" or "apis" for the two roots, else "".
	path, top string
	obj       runtime.Object // the legacy document of a path under the roots
}

// plan says whether the front answers path, from the path alone (the request phase): nil for
// methods other than GET and for groups or versions no upstream serves (their 404 is genuine). The
// path is split at most into four parts, so its cost does not grow with its slashes.
func (f *frontDiscovery) plan(method, path string) *discoveryPlan {
	if method != http.MethodGet {
		return nil
	}
	p, _, _ := strings.Cut(path, "?")
	parts := strings.SplitN(strings.Trim(p, "/"), "/", 4)
	d := &discoveryPlan{f: f, path: p}
	switch {
	case len(parts) == 1 && (parts[0] == "api" || parts[0] == "apis"):
		d.top = parts[0]
	case len(parts) == 2 && parts[0] == "api":
		l, ok := f.resources[schema.GroupVersion{Version: parts[1]}]
		if !ok {
			return nil
		}
		d.obj = withKind(l)
	case len(parts) == 2 && parts[0] == "apis":
		g, ok := f.groups[parts[1]]
		if !ok {
			return nil
		}
		group := *g
		group.Kind, group.APIVersion = "APIGroup", "v1"
		d.obj = &group
	case len(parts) == 3 && parts[0] == "apis":
		l, ok := f.resources[schema.GroupVersion{Group: parts[1], Version: parts[2]}]
		if !ok {
			return nil
		}
		d.obj = withKind(l)
	default:
		return nil
	}
	return d
}

// answer is the front's answer to the planned path for this Accept and If-None-Match, or nil to
// let the apiserver's pass: a request for the apiserver's own view (profile=nopeer). Each
// representation is built once per Topology (cached) and kept within maxCacheBytes.
func (d *discoveryPlan) answer(accept, ifNoneMatch string) *extprocv3.ProcessingResponse {
	mt, _ := negotiation.NegotiateMediaTypeOptions(accept, discoveryCodecs.SupportedMediaTypes(), aggregated.DiscoveryEndpointRestrictions)
	isAggregated := aggregated.IsAggregatedDiscoveryGVK(mt.Convert)
	if isAggregated && mt.Profile == "nopeer" {
		return nil
	}
	write, restrictions := d.writer(isAggregated)
	c := d.f.cached(negotiatedKey(d.path, accept, restrictions), write)
	if c.notModified != nil && ifNoneMatch == c.etag {
		return c.notModified
	}
	return c.full
}

// writer is the apiserver handler that serves the planned path in the representation asked for
// (aggregated or legacy), with the restrictions it negotiates under.
func (d *discoveryPlan) writer(isAggregated bool) (func(http.ResponseWriter, *http.Request), negotiation.EndpointRestrictions) {
	f := d.f
	legacy := func(obj runtime.Object) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			responsewriters.WriteObjectNegotiated(discoveryCodecs, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, obj, false)
		}
	}
	switch {
	case d.top != "" && isAggregated:
		doc := f.apis
		if d.top == "api" {
			doc = f.api
		}
		return func(w http.ResponseWriter, r *http.Request) {
			out, _, err := negotiation.NegotiateOutputMediaType(r, discoveryCodecs, aggregated.DiscoveryEndpointRestrictions)
			if err != nil || out.Convert == nil {
				w.WriteHeader(http.StatusNotAcceptable)
				return
			}
			list := doc.List
			aggregated.ServeHTTPWithETag(&list, doc.ETag, out.Convert.GroupVersion(), discoveryCodecs, w, r)
		}, aggregated.DiscoveryEndpointRestrictions
	case d.top == "api":
		versions := &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}}
		for _, g := range f.api.List.Items {
			for _, v := range g.Versions {
				versions.Versions = append(versions.Versions, v.Version)
			}
		}
		return legacy(versions), negotiation.DefaultEndpointRestrictions
	case d.top == "apis":
		return legacy(f.legacy), negotiation.DefaultEndpointRestrictions
	}
	return legacy(d.obj), negotiation.DefaultEndpointRestrictions
}

// cached returns the answers for key, building them with write if they are not cached: one build
// at a time per representation (requests asking for it meanwhile wait for that build).
func (f *frontDiscovery) cached(key cacheKey, write func(http.ResponseWriter, *http.Request)) *cachedResponse {
	f.mu.Lock()
	c, ok := f.cache[key]
	f.mu.Unlock()
	if ok {
		return c
	}
	v, _, _ := f.builds.Do(key.String(), func() (any, error) {
		f.mu.Lock()
		c, ok := f.cache[key]
		f.mu.Unlock()
		if ok {
			return c, nil // built by the flight that just ended
		}
		c = buildAnswer(key, write)
		f.mu.Lock()
		if _, raced := f.cache[key]; !raced && f.cacheBytes+c.size <= f.maxBytes {
			f.cache[key] = c
			f.cacheBytes += c.size
		}
		f.mu.Unlock()
		return c, nil
	})
	return v.(*cachedResponse)
}

// buildAnswer runs write for the canonical request of key and keeps its answer, and the 304 of a 200
// with an ETag.
func buildAnswer(key cacheKey, write func(http.ResponseWriter, *http.Request)) *cachedResponse {
	r, _ := http.NewRequest(http.MethodGet, key.path, nil)
	r.Header.Set("Accept", key.accept())
	w := &responseBuffer{header: http.Header{}}
	write(w, r)
	c := &cachedResponse{full: respond(w.code(), w.header, w.body), size: len(w.body) + len(key.path) + 256}
	if etag := w.header.Get("ETag"); etag != "" && w.code() == http.StatusOK {
		c.etag, c.notModified = etag, respond(http.StatusNotModified, w.header, nil)
	}
	return c
}

func withKind(l *metav1.APIResourceList) *metav1.APIResourceList {
	out := *l
	out.Kind, out.APIVersion = "APIResourceList", "v1"
	return &out
}

// respond is an ImmediateResponse carrying a served discovery document.
func respond(code int, h http.Header, body []byte) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	for _, k := range []string{"Content-Type", "ETag", "Vary", "Cache-Control"} {
		if v := h.Get(k); v != "" {
			set = append(set, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)}})
		}
	}
	return immediateResponse(code, set, body, "skewgate_discovery")
}

// responseBuffer is the http.ResponseWriter the apiserver's serializers write into.
type responseBuffer struct {
	header http.Header
	status int
	body   []byte
}

func (b *responseBuffer) Header() http.Header { return b.header }
func (b *responseBuffer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}
func (b *responseBuffer) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *responseBuffer) code() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}
