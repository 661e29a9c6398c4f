package xds

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/skewgate/skewgate/internal/xdstest"
	"github.com/skewgate/skewgate/xds/envoyconf"
)

// walk calls visit for m and every message inside it, depth first, with the path of field names that
// leads there; an Any is unpacked (and packed again after visit, which may change it).
func walk(t testing.TB, m protoreflect.Message, path string, visit func(path string, m protoreflect.Message)) {
	t.Helper()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		walk(t, inner.ProtoReflect(), path+"("+string(inner.ProtoReflect().Descriptor().Name())+")", visit)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
		if err != nil {
			t.Fatal(err)
		}
		a.Value = b
		return
	}
	visit(path, m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				walk(t, v.List().Get(i).Message(), p, visit)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(t, mv.Message(), p, visit)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walk(t, v.Message(), p, visit)
		}
		return true
	})
}

// inlineCertificates lists every certificate, key or CA in m that does not arrive by SDS: a
// TlsCertificate or a CertificateValidationContext with a trusted CA outside a Secret, and a Secret
// without a watched directory.
func inlineCertificates(t testing.TB, m proto.Message) []string {
	var bad []string
	walk(t, m.ProtoReflect(), string(m.ProtoReflect().Descriptor().Name()), func(path string, m protoreflect.Message) {
		inSecret := strings.Contains(path, "(Secret)") || strings.HasPrefix(path, "Secret")
		switch x := m.Interface().(type) {
		case *tlsv3.TlsCertificate:
			if !inSecret {
				bad = append(bad, path+": inline TlsCertificate")
			} else if x.WatchedDirectory.GetPath() == "" {
				bad = append(bad, path+": secret without watched_directory")
			}
		case *tlsv3.CertificateValidationContext:
			if x.TrustedCa != nil && !inSecret {
				bad = append(bad, path+": inline trusted_ca")
			}
			if x.TrustedCa != nil && inSecret && x.WatchedDirectory.GetPath() == "" {
				bad = append(bad, path+": secret without watched_directory")
			}
		}
	})
	return bad
}

// TestNoInlineCertificates: every certificate, key and CA in every generated resource and in the
// bootstrap (and the SDS files it references) arrives by SDS with a watched directory, so it reloads.
func TestNoInlineCertificates(t *testing.T) {
	o := testOptions()
	o.ExtProcAddress = "10.1.2.3:18001"
	o.ExtProcCAFile, o.ExtProcCertFile, o.ExtProcKeyFile = "/etc/skewgate/extproc/ca.crt", "/etc/skewgate/extproc/tls.crt", "/etc/skewgate/extproc/tls.key"
	rs, err := Translate(xdstest.Scenario(t, "testdata/three-two-sets.in.yaml"), o)
	if err != nil {
		t.Fatal(err)
	}
	msgs := allResources(rs)
	names := map[string]bool{}
	for _, s := range rs.Secrets {
		names[s.Name] = true
	}
	for _, want := range []string{SecretFrontCert, SecretClientCA, SecretUpstreamCA, SecretFrontProxyCert, SecretExtProcCert, SecretExtProcCA} {
		if !names[want] {
			t.Errorf("secret %s is not served", want)
		}
	}
	// The bootstrap with mTLS to the xDS server, as envoy/bootstrap.yaml renders it.
	bo := envoyconf.BootstrapOptions{
		NodeID: "front-1", NodeCluster: "skewgate-front", XDSAddress: "skewgate.cp-1.example:18000",
		XDSCAFile: "/etc/skewgate/xds/ca.crt", XDSCertFile: "/etc/skewgate/xds/tls.crt", XDSKeyFile: "/etc/skewgate/xds/tls.key",
	}
	b, err := envoyconf.Bootstrap(bo)
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, b)
	files, err := envoyconf.BootstrapSDSFiles(bo)
	if err != nil {
		t.Fatal(err)
	}
	for name, y := range files {
		if !strings.Contains(string(y), "watchedDirectory") {
			t.Errorf("SDS file %s has no watched directory:\n%s", name, y)
		}
	}
	for _, m := range msgs {
		for _, bad := range inlineCertificates(t, m) {
			t.Error(bad)
		}
	}

	// The check itself finds an inline certificate.
	c := proto.Clone(rs.Clusters[0]).(*clusterv3.Cluster)
	ts, err := envoyconf.Pack(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: envoyconf.File("/c.crt"), PrivateKey: envoyconf.File("/c.key")}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.TransportSocket = &corev3.TransportSocket{Name: envoyconf.TransportTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: ts}}
	if bad := inlineCertificates(t, c); len(bad) != 1 {
		t.Errorf("an inline certificate was reported %d times: %v", len(bad), bad)
	}
}
