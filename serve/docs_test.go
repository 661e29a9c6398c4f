package serve

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/serve/options"
)

var metricName = regexp.MustCompile(`skewgate_[a-z_]+`)

// metric is a metric's name, label names (sorted, joined by ",") and, when known, its type.
type metric struct {
	labels, typ string
}

// descRE reads prometheus.Desc's String(), the only place a Desc names its metric and labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// registered is every skewgate_ metric of the registry Start builds, with every option that
// registers more on (a kubeconfig: the client certificate expiry; gRPC certificates: the reload
// counters; the kubernetes endpoints mode, whose metrics are registered either way): names and labels from the collectors' descriptions (a vector with no series yet is
// described too), types from a scrape where it has series.
func registered(t *testing.T) map[string]metric {
	t.Helper()
	dir := t.TempDir()
	crt, key, err := cert.GenerateSelfSignedCertKey("skewgate", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: crt, keyFile: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, _, _ := startServer(t, ctx, func(o *options.Options) {
		o.GRPCCertFile, o.GRPCKeyFile, o.GRPCClientCAFile = certFile, keyFile, certFile
		o.KubernetesEndpoints, o.KubernetesEndpointAddress = true, "192.0.2.1"
	})
	out := map[string]metric{}
	ch := make(chan *prometheus.Desc)
	go func() { srv.Registry.Describe(ch); close(ch) }()
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		if !strings.HasPrefix(m[1], "skewgate_") {
			continue // the Go and process collectors
		}
		labels := strings.Split(m[2], ",")
		if m[2] == "" {
			labels = nil
		}
		sort.Strings(labels)
		out[m[1]] = metric{labels: strings.Join(labels, ",")}
	}
	mfs, err := srv.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if m, ok := out[mf.GetName()]; ok {
			m.typ = strings.ToLower(mf.GetType().String())
			out[mf.GetName()] = m
		}
	}
	// The Go and process collectors alone have far more; skewgate's own are about 30.
	if len(out) < 25 {
		t.Fatalf("the app's registry has only %d skewgate_ metrics", len(out))
	}
	return out
}

// documented reads README's metrics table: per metric its labels (as `name{a,b}` writes them) and
// the row's type.
func documented(t *testing.T, readme string) map[string]metric {
	t.Helper()
	start := strings.Index(readme, "| metric | type | meaning |")
	if start < 0 {
		t.Fatal("README.md has no metrics table (| metric | type | meaning |)")
	}
	table := readme[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	name := regexp.MustCompile("`(skewgate_[a-z_]+)(?:\\{([a-z_,]*)\\})?`")
	out := map[string]metric{}
	for _, row := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(row, "|")
		if len(cells) < 4 {
			t.Fatalf("metrics table row %q has no type column", row)
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			labels := strings.Split(m[2], ",")
			if m[2] == "" {
				labels = nil
			}
			sort.Strings(labels)
			if _, dup := out[m[1]]; dup {
				t.Errorf("README's metrics table lists %s twice", m[1])
			}
			out[m[1]] = metric{labels: strings.Join(labels, ","), typ: strings.TrimSpace(cells[2])}
		}
	}
	return out
}

// TestMetricsDocumented: README's metrics table and the registry Start builds list the same
// metrics with the same labels and types, and the dashboard uses only metrics that exist.
func TestMetricsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	reg, doc := registered(t), documented(t, string(readme))
	typed := 0
	for name, r := range reg {
		d, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("%s{%s} is exported but not in README's metrics table", name, r.labels)
			continue
		case d.labels != r.labels:
			t.Errorf("%s: README's table gives labels {%s}, the registry {%s}", name, d.labels, r.labels)
		}
		if r.typ != "" {
			typed++
			if d.typ != r.typ {
				t.Errorf("%s: README's table says %s, the registry %s", name, d.typ, r.typ)
			}
		}
		// Where no series exists yet the type is the naming convention's: counters, and only they,
		// end in _total.
		if strings.HasSuffix(name, "_total") != (d.typ == "counter") {
			t.Errorf("%s: README's table says %s: a counter's name, and only a counter's, ends in _total", name, d.typ)
		}
	}
	for name := range doc {
		if _, ok := reg[name]; !ok {
			t.Errorf("README's metrics table lists %s, which the app does not export", name)
		}
	}
	t.Logf("%d metrics compared, %d of them with a series (type checked)", len(reg), typed)
	dash, err := os.ReadFile("../deploy/grafana/skewgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metricName.FindAllString(string(dash), -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && doc[b].typ == "histogram" {
				base = b // a histogram's series (its type was compared above)
			}
		}
		if _, ok := reg[base]; !ok {
			t.Errorf("the dashboard uses %s, which skewgate does not export", m)
		}
	}
}
