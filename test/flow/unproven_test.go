package flow

import (
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/xds"
)

// TestUnprovenUpstreamGetsNoEnvoyCluster: an upstream whose discovery was never fetched over
// verified TLS (a forged Lease pointing anywhere in the allowed CIDR) is in the Topology for
// operators to see, but xds, translating the Topology as it does, makes no cluster for it: Envoy
// opens no connection to it, not even a health check.
func TestUnprovenUpstreamGetsNoEnvoyCluster(t *testing.T) {
	g := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1",
		Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Verbs: []string{"get", "list"}}}}}}
	g.Name = "apps"
	doc := &discovery.Document{Hash: "apps", Groups: []apidiscoveryv2.APIGroupDiscovery{g}}
	top := discovery.Build("t-1", time.Now(), []discovery.UpstreamFacts{
		{Upstream: discovery.Upstream{Name: "cp-1", Address: "10.0.0.1:6443", Ready: true}, API: doc, APIs: doc},
		{Upstream: discovery.Upstream{Name: "evil", Address: "10.0.0.66:6443", Ready: true}},
	})
	if u, ok := top.Upstream("evil"); !ok || u.Capabilities {
		t.Errorf("evil = %+v %v: want it listed, unproven and without a cluster", u, ok)
	}
	for _, u := range top.Upstreams {
		if u.Name == "evil" {
			t.Error("an unproven upstream is among the upstreams xds makes clusters of")
		}
	}
	rs, err := xds.Translate(top, xds.Options{
		ServingCertFile: "/f/tls.crt", ServingKeyFile: "/f/tls.key", ClientCAFile: "/k/ca.crt", UpstreamCAFile: "/k/ca.crt",
		FrontProxyCertFile: "/k/fp.crt", FrontProxyKeyFile: "/k/fp.key", ExtProcAddress: "127.0.0.1:18001",
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range rs.Clusters {
		names = append(names, c.Name)
		if strings.Contains(c.String(), "10.0.0.66") {
			t.Errorf("cluster %s has the unproven address", c.Name)
		}
	}
	if len(names) == 0 || !strings.Contains(strings.Join(names, " "), "cp-1") {
		t.Errorf("clusters %v: want cp-1's", names)
	}
}
