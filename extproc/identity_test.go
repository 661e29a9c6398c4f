package extproc

import (
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"slices"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"

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

func values(headers []hline, key string) []string {
	var out []string
	for _, h := range headers {
		if h.key == key {
			out = append(out, h.value)
		}
	}
	return out
}

// TestEveryGroupReachesTheApiserver: a certificate with several Organizations, system:masters not
// the last, gives the apiserver every group once Envoy has applied the mutation as its source does.
func TestEveryGroupReachesTheApiserver(t *testing.T) {
	h := startServer(t)
	xfcc := clientCertXFCC(t, "carol", "system:masters", "dev", "platform-engineering-oncall")
	// The order the apiserver's x509 authenticator reads: the certificate's, as encoded (DER sorts a
	// SET OF, so read it back rather than trust the order given).
	_, rest, _ := strings.Cut(xfcc, `Cert="`)
	pemText, _ := url.PathUnescape(strings.TrimSuffix(rest, `"`))
	block, _ := pem.Decode([]byte(pemText))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	groups := cert.Subject.Organization
	if i := slices.Index(groups, "system:masters"); i < 0 || i == len(groups)-1 {
		t.Fatalf("the certificate's groups %v do not have system:masters before the last: the test is wrong", groups)
	}

	resp := h.roundTrip(t, envoyHeaders("GET", "/api/v1/namespaces", wire.ForwardedCertHeader, xfcc))
	m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	for _, sh := range m.GetSetHeaders() {
		if sh.Append == nil {
			t.Errorf("%s: append unset; Envoy reads only append", sh.Header.Key)
		}
		if sh.AppendAction != 0 {
			t.Errorf("%s: append_action %v, which Envoy ignores", sh.Header.Key, sh.AppendAction)
		}
	}
	// What arrived: the listener already removed client copies of X-Remote-*, but a stale value must
	// not survive either way.
	in := []hline{{":path", "/api/v1/namespaces"}, {wire.RemoteGroupHeader, "stale"}, {wire.RemoteUserHeader, "stale"}}
	out := applyLikeEnvoy(in, m)
	if got := values(out, wire.RemoteGroupHeader); !slices.Equal(got, groups) {
		t.Errorf("groups the apiserver sees: %v, want %v", got, groups)
	}
	if got := values(out, wire.RemoteUserHeader); !slices.Equal(got, []string{"carol"}) {
		t.Errorf("users the apiserver sees: %v, want [carol]", got)
	}
	if got := values(out, wire.RouteHeader); !slices.Equal(got, []string{wire.AllCluster}) {
		t.Errorf("routing header: %v", got)
	}

	// The applier is faithful enough to catch the bug this guards against: with append left unset
	// (what append_action alone amounts to in Envoy) only the last group survives.
	unset := proto.Clone(m).(*extprocv3.HeaderMutation)
	for _, sh := range unset.SetHeaders {
		sh.Append = nil
	}
	if got := values(applyLikeEnvoy(in, unset), wire.RemoteGroupHeader); len(got) != 1 || got[0] != groups[len(groups)-1] {
		t.Errorf("without append the applier kept %v, want only the last group", got)
	}
}
