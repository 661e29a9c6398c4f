package dataplane

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/xds"
)

// skewgateAPIServerCluster is the HTTP/2 apiserver cluster skewgate translates for one apiserver at
// addr, as it ships (health checks, panic threshold 0, HttpProtocolOptions with its http_filters),
// with only the TLS sockets dropped so the fake upstream can speak h2c; withFilters false removes
// the upstream filter chain, which is the configuration before the fix.
func skewgateAPIServerCluster(t *testing.T, addr string, withFilters bool) *clusterv3.Cluster {
	t.Helper()
	g := apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "services", Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"}, Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "proxy", Verbs: []string{"get"}}}},
	}}}}
	doc := &discovery.Document{Groups: []apidiscoveryv2.APIGroupDiscovery{g}, Hash: "core"}
	top := discovery.Build("hcfail", time.Unix(0, 0), []discovery.UpstreamFacts{{
		Upstream: discovery.Upstream{Name: "a", Address: addr, Ready: true, Source: discovery.SourceStatic},
		API:      doc, APIs: &discovery.Document{Hash: "none"},
	}})
	rs, err := xds.Translate(top, xds.Options{
		ServingCertFile: "/etc/skewgate/front/tls.crt", ServingKeyFile: "/etc/skewgate/front/tls.key",
		UpstreamCAFile:     "/etc/kubernetes/pki/ca.crt",
		FrontProxyCertFile: "/etc/kubernetes/pki/front-proxy-client.crt", FrontProxyKeyFile: "/etc/kubernetes/pki/front-proxy-client.key",
		ExtProcAddress: "127.0.0.1:18001",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rs.Clusters {
		if len(c.HealthChecks) == 0 || len(c.TransportSocketMatches) > 0 {
			continue // the ext_proc cluster; the anonymous twin
		}
		var o httpv3.HttpProtocolOptions
		a := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if err := a.UnmarshalTo(&o); err != nil {
			t.Fatal(err)
		}
		if o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			continue // the HTTP/1.1 twin
		}
		if len(o.HttpFilters) == 0 {
			t.Fatalf("cluster %s: skewgate emits no upstream http_filters", c.Name)
		}
		if !withFilters {
			o.HttpFilters = nil
			c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] = anyOf(t, &o)
		}
		c.TransportSocket = nil
		c.HealthChecks[0].TransportSocketMatchCriteria = nil
		return c
	}
	t.Fatal("no HTTP/2 apiserver cluster in the translation")
	return nil
}

// hcFailRun is what a client beside the attacker saw.
type hcFailRun struct {
	excludedAtOnce bool          // the host was out right after one response with the header
	outFor         time.Duration // until the host was back after that one response
	normal, uh     int           // requests of the other client during the sustained attack, and its 503 UH
	attacks        int
}

// runHCFailAttack: one response with the header, then a sustained attack (one such response every
// 100 ms for 2 s) while another client sends requests back to back.
func runHCFailAttack(t *testing.T, withFilters bool) hcFailRun {
	up := hcFailUpstream(t)
	c, err := newCluster(testDP(t, 9), skewgateAPIServerCluster(t, strings.TrimPrefix(up.URL, "http://"), withFilters))
	if err != nil {
		t.Fatal(err)
	}
	waitWarm(t, c)
	h := c.hosts[0]
	if !h.available() {
		t.Fatal("the apiserver is not healthy after its first check")
	}
	var run hcFailRun
	if _, err := send(c, hcFailPath); err != nil {
		t.Fatal(err)
	}
	_, err = send(c, "/api/v1/namespaces")
	run.excludedAtOnce = errors.Is(err, errNoHealthyUpstream)
	start := time.Now()
	for !h.available() && time.Since(start) < 10*time.Second {
		time.Sleep(5 * time.Millisecond) // polls for the health check goroutine's next pass
	}
	run.outFor = time.Since(start)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				send(c, hcFailPath)
				run.attacks++
			}
		}
	})
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		_, err := send(c, "/api/v1/namespaces")
		run.normal++
		if errors.Is(err, errNoHealthyUpstream) {
			run.uh++
		} else if err != nil {
			t.Fatalf("the other client: %v", err)
		}
		time.Sleep(time.Millisecond) // paces the other client, about 1000 requests a second
	}
	close(stop)
	wg.Wait()
	return run
}

// TestImmediateHealthCheckFailAttack: a backend behind an apiserver's proxy answers with
// x-envoy-immediate-health-check-fail. Through skewgate's cluster without upstream filters the one
// apiserver is out at once and every other client gets 503 until the next passing /readyz check,
// and an attacker repeating it keeps the front mostly down; with the http_filters skewgate emits
// nothing happens.
func TestImmediateHealthCheckFailAttack(t *testing.T) {
	before := runHCFailAttack(t, false)
	t.Logf("before (no upstream filters): excluded at once %v, out for %v after one response; sustained: %d of %d other requests 503 UH (%d attack responses)",
		before.excludedAtOnce, before.outFor.Round(time.Millisecond), before.uh, before.normal, before.attacks)
	if !before.excludedAtOnce {
		t.Error("before: one response with the header did not take the apiserver out (the stand-in is kinder than Envoy)")
	}
	if before.uh == 0 {
		t.Error("before: the sustained attack failed no request of the other client")
	}
	after := runHCFailAttack(t, true)
	t.Logf("after (skewgate's http_filters): excluded at once %v; sustained: %d of %d other requests 503 UH (%d attack responses)",
		after.excludedAtOnce, after.uh, after.normal, after.attacks)
	if after.excludedAtOnce || after.uh != 0 {
		t.Errorf("after: excluded at once %v, %d of %d other requests 503 UH; want none", after.excludedAtOnce, after.uh, after.normal)
	}
}
