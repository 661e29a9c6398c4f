package extproc

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/internal/wire"
)

// hline is one request header line, in order, as Envoy's header map keeps them.
type hline struct{ key, value string }

// applyLikeEnvoy applies an ext_proc header mutation the way Envoy's ext_proc filter does
// (source/extensions/filters/http/ext_proc/mutation_utils.cc, MutationUtils::applyHeaderMutations):
// remove_headers first, then each set_headers entry in order; the deprecated `append` BoolValue,
// unset meaning false, decides between replacing every value of the header (setCopy) and adding
// one (addCopy). append_action is not read.
func applyLikeEnvoy(headers []hline, m *extprocv3.HeaderMutation) []hline {
	headers = slices.Clone(headers)
	for _, r := range m.GetRemoveHeaders() {
		headers = slices.DeleteFunc(headers, func(h hline) bool { return h.key == strings.ToLower(r) })
	}
	for _, sh := range m.GetSetHeaders() {
		k, v := strings.ToLower(sh.Header.Key), string(sh.Header.RawValue)
		if sh.GetAppend().GetValue() {
			headers = append(headers, hline{k, v})
			continue
		}
		i := slices.IndexFunc(headers, func(h hline) bool { return h.key == k })
		if i < 0 {
			headers = append(headers, hline{k, v})
			continue
		}
		headers[i].value = v
		headers = append(headers[:i+1], slices.DeleteFunc(headers[i+1:], func(h hline) bool { return h.key == k })...)
	}
	return headers
}

// identityLines are the identity headers as the Lua filter sets them for a certificate with several
// Organizations, system:masters not the last, a UID and the credential-id extra.
var identityLines = []hline{
	{wire.RemoteUserHeader, "carol"},
	{wire.RemoteGroupHeader, "dev"}, {wire.RemoteGroupHeader, "system:masters"}, {wire.RemoteGroupHeader, "ops"},
	{wire.RemoteUIDHeader, "4f1c"},
	{wire.RemoteExtraPrefix + "authentication.kubernetes.io%2fcredential-id", "X509SHA256=00ff"},
}

func remoteLines(hs []hline) []hline {
	return slices.DeleteFunc(slices.Clone(hs), func(h hline) bool { return !strings.HasPrefix(h.key, "x-remote-") })
}

// TestIdentityIsLeftToTheLuaFilter: whatever ext_proc decides, it neither sets nor removes an
// X-Remote-* header, so the identity the Lua filter set reaches the apiserver exactly as it was, in
// order, for every kind of decision (default, routed, discovery, non-resource, upgrade, without a
// Topology).
func TestIdentityIsLeftToTheLuaFilter(t *testing.T) {
	h := startServer(t)
	mapPath := "/apis/admissionregistration.k8s.io/v1/" + mapResourceName
	paths := map[string][]string{
		"default":      {"GET", "/api/v1/namespaces"},
		"routed":       {"GET", mapPath},
		"discovery":    {"GET", "/apis"},
		"non-resource": {"GET", "/version"},
		"upgrade":      {"POST", "/api/v1/namespaces/d/pods/p/exec", "upgrade", "SPDY/3.1"},
	}
	run := func(name string) {
		for what, p := range paths {
			extra := p[2:]
			for _, l := range identityLines {
				extra = append(extra, l.key, l.value)
			}
			resp := h.roundTrip(t, envoyHeaders(p[0], p[1], extra...))
			m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
			if m == nil {
				t.Fatalf("%s %s: no header mutation: %v", name, what, resp)
			}
			for _, r := range m.GetRemoveHeaders() {
				if strings.HasPrefix(strings.ToLower(r), "x-remote-") {
					t.Errorf("%s %s: removes %s", name, what, r)
				}
			}
			for _, s := range m.GetSetHeaders() {
				if strings.HasPrefix(strings.ToLower(s.Header.Key), "x-remote-") {
					t.Errorf("%s %s: sets %s", name, what, s.Header.Key)
				}
			}
			in := append([]hline{{":path", p[1]}}, identityLines...)
			if got := remoteLines(applyLikeEnvoy(in, m)); !slices.Equal(got, identityLines) {
				t.Errorf("%s %s: the apiserver would see %v, want %v", name, what, got, identityLines)
			}
		}
	}
	run("synced")
	h.src.t.Store(nil)
	run("unsynced")
}

// TestAnonymousOnlyFromTheRoute: a request is anonymous (the :anon twin) exactly when Envoy's route
// says so (gRPC metadata of the anonymous twin routes, chosen before any filter ran). No header
// decides it: not an X-Forwarded-Client-Cert (ext_proc is no longer shown Envoy's; one here could
// only be a client's), not the presence or absence of identity headers.
func TestAnonymousOnlyFromTheRoute(t *testing.T) {
	h := startServer(t)
	none := []string{wire.CredentialsMetadata, wire.CredentialsNone}
	cases := []struct {
		name    string
		extra   []string
		md      []string
		cluster string
	}{
		{"route says none", nil, none, wire.AnonCluster(wire.AllCluster)},
		{"route says none, a certificate header", []string{wire.ForwardedCertHeader, `Hash=00;Cert="x"`}, none, wire.AnonCluster(wire.AllCluster)},
		{"route says none, identity headers", []string{wire.RemoteUserHeader, "admin", wire.RemoteGroupHeader, "system:masters"}, none, wire.AnonCluster(wire.AllCluster)},
		{"credentials, no identity header (a token)", nil, nil, wire.AllCluster},
		{"credentials, identity headers", []string{wire.RemoteUserHeader, "carol"}, nil, wire.AllCluster},
		{"credentials, no certificate header", []string{"x-forwarded-client-cert-not", "1"}, nil, wire.AllCluster},
	}
	for _, c := range cases {
		first, _ := h.exchange(t, envoyHeaders("GET", "/api/v1/namespaces", c.extra...), "200", c.md...)
		if got := routeHeader(t, first.GetRequestHeaders().GetResponse().GetHeaderMutation()); got != c.cluster {
			t.Errorf("%s: cluster %q, want %q", c.name, got, c.cluster)
		}
	}
}

// TestIdentityRefusalIsAnsweredAndCounted: a request the Lua filter marked is answered with a 503
// metav1.Status and Retry-After, whatever it asks for (a discovery document, a routed resource, an
// anonymous route) and also without a Topology, never routed; it is counted under its reason, an
// unknown marker value under "other".
func TestIdentityRefusalIsAnsweredAndCounted(t *testing.T) {
	h := startServer(t)
	mapPath := "/apis/admissionregistration.k8s.io/v1/" + mapResourceName
	cases := []struct {
		path, marker, reason string
		md                   []string
	}{
		{"/api/v1/namespaces", "uid", "uid", nil},
		{"/apis", "eku", wire.IdentityRefusalOther, nil}, // not a reason the script sets
		{mapPath, "subject", "subject", nil},
		{"/version", "nouser", "nouser", []string{wire.CredentialsMetadata, wire.CredentialsNone}},
		{"/api/v1/pods", "unverified", "unverified", nil},
		{"/api/v1/pods", "UID", wire.IdentityRefusalOther, nil},
		{"/api/v1/pods", strings.Repeat("x", 5000), wire.IdentityRefusalOther, nil},
		{"/api/v1/pods", "", wire.IdentityRefusalOther, nil},
	}
	for i, c := range cases {
		if i == 3 {
			h.src.t.Store(nil) // the rest without a Topology
		}
		first, _ := h.exchange(t, envoyHeaders("GET", c.path, wire.IdentityRefusedHeader, c.marker), "200", c.md...)
		ir := first.GetImmediateResponse()
		if ir == nil || ir.Status.Code != 503 {
			t.Errorf("%s %.20q: want an immediate 503, got %v", c.path, c.marker, first)
			continue
		}
		var st metav1.Status
		if err := json.Unmarshal(ir.Body, &st); err != nil || st.Kind != "Status" || st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable ||
			!strings.Contains(st.Message, "("+c.reason+")") {
			t.Errorf("%s %.20q: body %s (%v), want a 503 Status naming %s", c.path, c.marker, ir.Body, err, c.reason)
		}
		var retry bool
		for _, s := range ir.GetHeaders().GetSetHeaders() {
			retry = retry || (s.Header.Key == "retry-after" && string(s.Header.RawValue) == "1")
		}
		if !retry {
			t.Errorf("%s %.20q: no Retry-After: %v", c.path, c.marker, ir.GetHeaders())
		}
	}
	want := map[string]float64{"uid": 1, "subject": 1, "nouser": 1, "unverified": 1, wire.IdentityRefusalOther: 4}
	for r, n := range want {
		if got := testutil.ToFloat64(h.srv.metrics.identityRefused.WithLabelValues(r)); got != n {
			t.Errorf("skewgate_identity_refused_total{reason=%q} = %v, want %v", r, got, n)
		}
	}
	if got := testutil.CollectAndCount(h.srv.metrics.identityRefused); got != len(wire.IdentityRefusalReasons)+1 {
		t.Errorf("%d reason labels exported, want %d (a marker value never becomes a label)", got, len(wire.IdentityRefusalReasons)+1)
	}
	if got := testutil.ToFloat64(h.srv.metrics.decisions.WithLabelValues(OutcomeIdentityRefused)); got != float64(len(cases)) {
		t.Errorf("identity_refused decisions = %v, want %d", got, len(cases))
	}
}
