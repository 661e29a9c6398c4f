package xds

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/internal/wire"
	"github.com/skewgate/skewgate/test/synthetic"
)

var dumpRegexes = flag.String("dump-regexes", "", "write every skew route pattern of the calibration set to this file, one a line")

// calibrationPatterns are the patterns of every shape, for names of several lengths and the names
// the classifier reads specially, and the routing header's pattern (wire.RoutedClusterPattern).
func calibrationPatterns() []string {
	out := []string{wire.RoutedClusterPattern}
	names := []string{"a", "widgets", "mutatingadmissionpolicies", "validatingadmissionpolicybindings", strings.Repeat("r", 40)}
	for _, g := range []string{"", "admissionregistration.k8s.io"} {
		for _, r := range append(names, "namespaces", "status") {
			for _, sub := range []string{"", "status", "scale", "ownership"} {
				for _, shape := range []skewShape{shapeAll, shapeWatch, shapeNamed, shapeCollection} {
					k := discovery.ResourceKey{Group: g, Version: "v1beta1", Resource: r, Subresource: sub}
					out = append(out, keyRegex(k, shape))
				}
			}
		}
	}
	return out
}

// TestRegexCostBoundsRE2 holds regexCost above the RE2 program sizes in testdata/re2-program-size.tsv,
// measured with RE2 itself (RE2::ProgramSize, libre2 2022-06-01) for calibrationPatterns, and close
// enough that the bound keeps long names.
func TestRegexCostBoundsRE2(t *testing.T) {
	if *dumpRegexes != "" {
		if err := os.WriteFile(*dumpRegexes, []byte(strings.Join(calibrationPatterns(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(filepath.Join("testdata", "re2-program-size.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	measured := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		size, re, ok := strings.Cut(sc.Text(), "\t")
		if !ok || strings.HasPrefix(size, "#") {
			continue
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		measured[re] = n
	}
	for _, re := range calibrationPatterns() {
		n, ok := measured[re]
		if !ok {
			t.Errorf("no RE2 measurement for %s (regenerate testdata/re2-program-size.tsv)", re)
			continue
		}
		if c := regexCost(re); c < n || c > n+25 {
			t.Errorf("regexCost(%s) = %d, RE2 measured %d", re, c, n)
		}
	}
}

// skewedTopology has n resources served only by the newer of two upstreams (one group each, so the
// group prefixes differ too).
func skewedTopology(n int) *discovery.Topology {
	facts := synthetic.Facts(2, n+10, 2)
	// synthetic: version 1 serves n+10 resources, version 0 serves 5 fewer; widen the gap to n.
	old := *facts[0].APIs
	old.Groups = nil
	old.Hash = "old"
	facts[0].APIs = &old
	return discovery.Build("skewed", time.Unix(0, 0), facts)
}

// TestSkewRoutesBounded measures the table for 50 skewed resources: routes per resource and the
// largest pattern, against Envoy's default RE2 program limit.
func TestSkewRoutesBounded(t *testing.T) {
	top := skewedTopology(50)
	if got := len(top.Skewed()); got < 50 {
		t.Fatalf("%d skewed resources, want at least 50", got)
	}
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var skew, maxCost, total int
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		if !strings.Contains(r.Name, "skew:") {
			continue
		}
		skew++
		if re := r.Match.GetSafeRegex().GetRegex(); re != "" {
			c := regexCost(re)
			total += c
			maxCost = max(maxCost, c)
		}
	}
	n := len(top.Skewed())
	t.Logf("%d skewed resources: %d skew routes (%.1f each), largest pattern %d RE2 instructions, %d in all", n, skew, float64(skew)/float64(n), maxCost, total)
	if skew > 6*n {
		t.Errorf("%d routes for %d resources", skew, n)
	}
	if maxCost > maxRegexProgram {
		t.Errorf("a pattern costs %d", maxCost)
	}
}

// TestSkewRoutesSkipWhatTheyCannotExpress: a resource name too long for one small pattern is left
// to ext_proc, and the rest of the table is still served.
func TestSkewRoutesSkipWhatTheyCannotExpress(t *testing.T) {
	tb := &translator{o: testOptions(), top: skewedTopology(3)}
	long := discovery.ResourceKey{Group: "g.example.com", Version: "v1", Resource: strings.Repeat("x", 63)}
	if _, err := tb.keyRoutes(long, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d", maxRegexProgram)) {
		t.Fatalf("a %d-character resource name: error %v, want its pattern's cost over %d", len(long.Resource), err, maxRegexProgram)
	}
	for k, want := range map[discovery.ResourceKey]string{
		{Version: "v1", Resource: "watch"}: `resource "watch" is read as a verb prefix`,
		{Version: "v1", Resource: "proxy"}: `resource "proxy" is read as a verb prefix`,
		{Version: "v1", Resource: "a/b"}:   `"a/b" is not made of unreserved characters`,
		{Version: "v1", Resource: "a%2Fb"}: `"a%2Fb" is not made of unreserved characters`,
		{Version: "v1"}:                    "empty version or resource",
	} {
		if err := expressible(k); err == nil || err.Error() != want {
			t.Errorf("%+v: error %v, want %q", k, err, want)
		}
	}
	routes, skipped, err := tb.emitRows(nil)
	if err != nil || len(skipped) != 0 || len(routes) == 0 {
		t.Fatalf("routes %d, skipped %v, %v", len(routes), skipped, err)
	}
}

// TestSkewRoutesComeAfterRoutedBeforeDefault: ext_proc's header wins, the default routes come last.
func TestSkewRoutesComeAfterRoutedBeforeDefault(t *testing.T) {
	rs, err := Translate(skewedTopology(2), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		kind := "other"
		switch {
		case r.GetRoute().GetClusterHeader() != "":
			kind = "routed"
		case strings.Contains(r.Name, "skew:"):
			kind = "skew"
		}
		if len(order) == 0 || order[len(order)-1] != kind {
			order = append(order, kind)
		}
	}
	if fmt.Sprint(order) != "[routed skew other]" {
		t.Errorf("route kinds in order %v", order)
	}
	// No skew route looks at a header a client could use to reach or skip it, beyond the
	// credential-presence twin and the upgrade twin that ext_proc's own routes have too.
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		if !strings.Contains(r.Name, "skew:") {
			continue
		}
		for _, h := range r.Match.Headers {
			switch h.Name {
			case ":path", ":method", "upgrade", "authorization", "x-forwarded-client-cert":
			default:
				t.Errorf("route %s matches header %s", r.Name, h.Name)
			}
		}
		if _, ok := r.Match.PathSpecifier.(*routev3.RouteMatch_SafeRegex); !ok {
			t.Errorf("route %s: path specifier %T", r.Name, r.Match.PathSpecifier)
		}
	}
}

// TestUnexpressedKeysAreReported: a skewed key the route table cannot carry is not dropped silently:
// Translate lists it with its reason (the server logs it, counts it in skewgate_xds_unexpressed_keys
// and /topology shows it), and the rest of the table is still built.
func TestUnexpressedKeysAreReported(t *testing.T) {
	facts := synthetic.Facts(2, 15, 2)
	newer := *facts[1].APIs
	newer.Groups = slices.Clone(newer.Groups)
	g := newer.Groups[0]
	g.Versions = slices.Clone(g.Versions)
	long := strings.Repeat("x", 63)
	g.Versions[0].Resources = append(slices.Clone(g.Versions[0].Resources), apidiscoveryv2.APIResourceDiscovery{
		Resource: long, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"},
	})
	newer.Groups[0] = g
	newer.Hash = "newer"
	facts[1].APIs = &newer
	top := discovery.Build("unexpressed", time.Unix(0, 0), facts)
	rs, err := Translate(top, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := discovery.ResourceKey{Group: g.Name, Version: "v1", Resource: long}
	if len(rs.Unexpressed) != 1 || rs.Unexpressed[0].Key != want || rs.Unexpressed[0].Reason == "" {
		t.Fatalf("Unexpressed = %+v, want exactly %v with a reason", rs.Unexpressed, want)
	}
	if _, err := (&translator{o: testOptions(), top: top}).keyRoutes(want, nil); err == nil || err.Error() != rs.Unexpressed[0].Reason {
		t.Errorf("reason %q, keyRoutes says %v", rs.Unexpressed[0].Reason, err)
	}
	skew := 0
	for _, r := range rs.Routes[0].VirtualHosts[0].Routes {
		if strings.Contains(r.Name, "skew:") {
			skew++
			if strings.Contains(r.Name, long) {
				t.Errorf("route %s for the unexpressed key", r.Name)
			}
		}
	}
	if skew == 0 {
		t.Error("no skew routes for the other skewed keys")
	}
}
