package extproc

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
)

const (
	acceptV2        = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptV2beta1   = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	acceptV2Proto   = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptKubectl   = acceptV2 + "," + acceptV2beta1 + ",application/json"
	acceptV2NoPeer  = acceptV2 + ";profile=nopeer"
	protobufType    = "application/vnd.kubernetes.protobuf"
	mapResourceName = "mutatingadmissionpolicies"
)

func header(ir *extprocv3.ImmediateResponse, key string) string {
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.Header.Key == key {
			return string(h.Header.RawValue)
		}
	}
	return ""
}

// TestDiscoveryNegotiation: the front answers discovery the way an apiserver does, from the merged
// documents, for every Accept a client sends.
func TestDiscoveryNegotiation(t *testing.T) {
	h := startServer(t)
	top := h.src.Current()
	// get runs the whole exchange for a client the apiserver authorizes (upstream 200).
	get := func(path, accept string, extra ...string) *extprocv3.ProcessingResponse {
		_, last := h.exchange(t, envoyHeaders("GET", path, append([]string{"accept", accept}, extra...)...), "200")
		return last
	}
	aggregatedJSON := func(name string, resp *extprocv3.ProcessingResponse, version string) *extprocv3.ImmediateResponse {
		t.Helper()
		ir := resp.GetImmediateResponse()
		if ir == nil || ir.Status.Code != 200 {
			t.Fatalf("%s: want 200, got %v", name, resp)
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(ir.Body, &list); err != nil || list.Kind != "APIGroupDiscoveryList" || list.APIVersion != "apidiscovery.k8s.io/"+version {
			t.Fatalf("%s: body %.200s (%v)", name, ir.Body, err)
		}
		if ct := header(ir, "content-type"); !strings.Contains(ct, "v="+version) {
			t.Errorf("%s: content-type %q", name, ct)
		}
		return ir
	}

	// Aggregated v2: the union of all upstreams, with the Topology's ETag.
	for _, accept := range []string{acceptV2, acceptKubectl} {
		ir := aggregatedJSON(accept, get("/apis", accept), "v2")
		if !strings.Contains(string(ir.Body), mapResourceName) {
			t.Errorf("merged /apis lacks %s (served only by new)", mapResourceName)
		}
		if etag := header(ir, "etag"); etag != strconv.Quote(top.APIs.ETag) {
			t.Errorf("etag %q, want %q", etag, strconv.Quote(top.APIs.ETag))
		}
	}
	core := aggregatedJSON("/api", get("/api", acceptV2), "v2")
	if !strings.Contains(string(core.Body), `"configmaps"`) {
		t.Errorf("/api lacks configmaps: %.300s", core.Body)
	}

	// v2beta1 exactly as the apiserver library decides (served by conversion, or refused once the
	// beta type is removed).
	beta := get("/apis", acceptV2beta1)
	if aggregated.IsAggregatedDiscoveryGVK(&schema.GroupVersionKind{Group: "apidiscovery.k8s.io", Version: "v2beta1", Kind: "APIGroupDiscoveryList"}) {
		aggregatedJSON("v2beta1", beta, "v2beta1")
	} else if ir := beta.GetImmediateResponse(); ir == nil || ir.Status.Code != 406 {
		// The apiserver hands it to the legacy handler, which cannot produce that type.
		t.Errorf("v2beta1 removed: want 406 as from an apiserver, got %v", beta)
	}

	// Protobuf, decoded with the apiserver's own codecs.
	pb := get("/apis", acceptV2Proto).GetImmediateResponse()
	if pb == nil || pb.Status.Code != 200 || !strings.HasPrefix(header(pb, "content-type"), protobufType) {
		t.Fatalf("protobuf: %v", pb)
	}
	info, ok := runtime.SerializerInfoForMediaType(discoveryCodecs.SupportedMediaTypes(), protobufType)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if _, _, err := info.Serializer.Decode(pb.Body, nil, &list); err != nil || len(list.Items) != len(top.APIs.List.Items) {
		t.Fatalf("protobuf body: %d groups, want %d (%v)", len(list.Items), len(top.APIs.List.Items), err)
	}

	// If-None-Match with the current ETag: 304, no body; a stale one: the document.
	etag := strconv.Quote(top.APIs.ETag)
	if ir := get("/apis", acceptV2, "if-none-match", etag).GetImmediateResponse(); ir == nil || ir.Status.Code != 304 || len(ir.Body) != 0 || header(ir, "etag") != etag {
		t.Errorf("If-None-Match current: %v", ir)
	}
	if ir := get("/apis", acceptV2, "if-none-match", `"stale"`).GetImmediateResponse(); ir == nil || ir.Status.Code != 200 {
		t.Errorf("If-None-Match stale: %v", ir)
	}

	// profile=nopeer asks for one apiserver's own view: it passes through. The Accept header is
	// only read in the response phase, so the request asks for it, and passes the apiserver's answer.
	for _, p := range []string{"/apis", "/api"} {
		first, last := h.exchange(t, envoyHeaders("GET", p, "accept", acceptV2NoPeer), "200")
		check(t, "nopeer "+p, first, want{cluster: wire.AllCluster})
		if last.GetImmediateResponse() != nil || last.GetResponseHeaders() == nil {
			t.Errorf("nopeer %s: want the apiserver's own answer, got %v", p, last)
		}
	}

	// Legacy lists, JSON and YAML; an unacceptable type gets 406 like from an apiserver.
	check(t, "legacy /apis", get("/apis", "application/json"), want{kind: "APIGroupList"})
	check(t, "legacy /api", get("/api", ""), want{kind: "APIVersions"})
	if ir := get("/apis/apps/v1", "application/yaml").GetImmediateResponse(); ir == nil || ir.Status.Code != 200 || !strings.Contains(string(ir.Body), "kind: APIResourceList") {
		t.Errorf("yaml: %v", ir)
	}
	if ir := get("/apis/apps", "text/html").GetImmediateResponse(); ir == nil || ir.Status.Code != 406 {
		t.Errorf("text/html: want 406, got %v", ir)
	}
	legacy := get("/apis/admissionregistration.k8s.io/v1", "application/json").GetImmediateResponse()
	if legacy == nil || !strings.Contains(string(legacy.Body), `"name":"`+mapResourceName+`"`) {
		t.Errorf("legacy resource list lacks %s: %v", mapResourceName, legacy)
	}

	// A new Topology replaces the served documents (and their ETag): here one more upstream serves
	// a group nobody served before.
	extra := doc("extra", grp("apps", "v1", rsc("deployments", "scale")), grp("admissionregistration.k8s.io", "v1", rsc("validatingadmissionpolicies", "status"), rsc("mutatingadmissionpolicies")),
		grp("widgets.example.org", "v1", rsc("gizmos")))
	next := discovery.Build("test-2", time.Now(), append(skewedFacts(), discovery.UpstreamFacts{
		Upstream: discovery.Upstream{Name: "extra", Ready: true}, API: doc("core", grp("", "v1", rsc("pods"))), APIs: extra,
	}))
	if next.APIs.ETag == top.APIs.ETag {
		t.Fatal("the second Topology has the first one's ETag: the test is wrong")
	}
	h.src.t.Store(next)
	ir := get("/apis", acceptV2, "if-none-match", etag).GetImmediateResponse()
	if ir == nil || ir.Status.Code != 200 || !strings.Contains(string(ir.Body), "widgets.example.org") || header(ir, "etag") != strconv.Quote(next.APIs.ETag) {
		t.Errorf("after a new Topology with another group, If-None-Match with the old ETag: %v, want 200 with widgets.example.org and ETag %q", ir, next.APIs.ETag)
	}
	if ir := get("/apis/widgets.example.org/v1", "application/json").GetImmediateResponse(); ir == nil || ir.Status.Code != 200 || !strings.Contains(string(ir.Body), `"gizmos"`) {
		t.Errorf("the new group's resource list is not served: %v", ir)
	}
}

func TestUpgradeUsesHTTP1Twin(t *testing.T) {
	h := startServer(t)
	mapPath := "/apis/admissionregistration.k8s.io/v1/" + mapResourceName + "?watch=true"
	check(t, "upgrade", h.roundTrip(t, envoyHeaders("GET", mapPath, "upgrade", "websocket", "connection", "Upgrade")),
		want{cluster: wire.HTTP1Cluster(wire.UpstreamCluster("new"))})
}

// TestNoCredentialsMeansNoIdentity: Envoy's per-route metadata marks a request without credentials;
// the service then names the anonymous twin of the cluster it picks (no client certificate towards
// the apiservers, which apply their own anonymous policy) and asserts no identity. Upgrades
// keep the HTTP/1.1 twin, with no identity. Without the metadata nothing changes.
func TestNoCredentialsMeansNoIdentity(t *testing.T) {
	h := startServer(t)
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	mapPath := "/apis/admissionregistration.k8s.io/v1/" + mapResourceName
	cases := []struct {
		name    string
		req     *extprocv3.ProcessingRequest
		md      []string
		cluster string
	}{
		{"default", envoyHeaders("GET", "/api/v1/namespaces", "x-remote-user", "admin", "x-remote-group", "system:masters"), none, wire.AnonCluster(wire.AllCluster)},
		{"routed", envoyHeaders("GET", mapPath), none, wire.AnonCluster(wire.UpstreamCluster("new"))},
		{"non-resource", envoyHeaders("GET", "/version"), none, wire.AnonCluster(wire.AllCluster)},
		{"discovery", envoyHeaders("GET", "/apis", "accept", acceptV2), none, wire.AnonCluster(wire.AllCluster)},
		{"upgrade", envoyHeaders("POST", "/api/v1/namespaces/d/pods/p/exec", "upgrade", "SPDY/3.1"), none, wire.HTTP1Cluster(wire.AllCluster)},
		{"routed upgrade", envoyHeaders("GET", mapPath+"?watch=true", "upgrade", "websocket"), none, wire.HTTP1Cluster(wire.UpstreamCluster("new"))},
		{"credentials present", envoyHeaders("GET", "/api/v1/namespaces"), nil, wire.AllCluster},
		{"unknown metadata value", envoyHeaders("GET", "/api/v1/namespaces"), []string{wire.CredentialsMetadata, "something else"}, wire.AllCluster},
	}
	for _, c := range cases {
		first, _ := h.exchange(t, c.req, "403", c.md...)
		m := first.GetRequestHeaders().GetResponse().GetHeaderMutation()
		if got := routeHeader(t, m); got != c.cluster {
			t.Errorf("%s: cluster %q, want %q", c.name, got, c.cluster)
		}
		for _, hv := range m.GetSetHeaders() {
			if strings.HasPrefix(hv.Header.Key, "x-remote-") {
				t.Errorf("%s: asserts %s: %s", c.name, hv.Header.Key, hv.Header.RawValue)
			}
		}
		// Client copies were removed by the listener's strip filter before ext_proc; it touches none.
		for _, hn := range m.GetRemoveHeaders() {
			if strings.HasPrefix(hn, "x-remote-") {
				t.Errorf("%s: removes %s, the Lua filter's", c.name, hn)
			}
		}
	}
}
