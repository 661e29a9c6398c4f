package kubeadm

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// golden compares got with testdata/<name>, after replacing the node's temp dir with /node and the
// certificate hash with a placeholder (the only output that is not deterministic).
func golden(t *testing.T, n *node, name string, got []byte) {
	t.Helper()
	got = bytes.ReplaceAll(got, []byte(n.root), []byte("/node"))
	got = regexp.MustCompile(`(client-certificate-sha256: )[0-9a-f]{64}`).ReplaceAll(got, []byte("${1}<sha256 of skewgate.crt>"))
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is stale (go test ./kubeadm -update):\n%s", path, got)
	}
}

func TestRenderGolden(t *testing.T) {
	n := newRSANode(t)
	o := n.options()
	o.AllowedCIDRs = []string{"10.0.0.0/24"}
	plan, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Issued {
		t.Error("no certificate existed, yet none was issued")
	}
	byName := map[string]File{}
	for _, f := range plan.Files {
		byName[strings.TrimPrefix(f.Path, n.root+"/")] = f
	}
	for path, name := range map[string]string{
		"manifests/skewgate.yaml":       "skewgate.yaml",
		"manifests/skewgate-envoy.yaml": "skewgate-envoy.yaml",
		"skewgate/envoy/bootstrap.yaml": "bootstrap.yaml",
		"skewgate/skewgate/kubeconfig":  "kubeconfig",
		"skewgate/" + RBACFile:          "rbac.yaml",
	} {
		f, ok := byName[path]
		if !ok {
			t.Errorf("no %s in the plan", path)
			continue
		}
		golden(t, n, name, f.Data)
		delete(byName, path)
	}
	// Copies of the node's files, byte for byte, each pod's in its own directory.
	for dst, src := range map[string]string{
		"skewgate/skewgate/ca.crt": "ca.crt", "skewgate/envoy/ca.crt": "ca.crt",
		"skewgate/envoy/apiserver.crt": "apiserver.crt", "skewgate/envoy/apiserver.key": "apiserver.key",
		"skewgate/envoy/front-proxy-client.crt": "front-proxy-client.crt", "skewgate/envoy/front-proxy-client.key": "front-proxy-client.key",
	} {
		want, _ := os.ReadFile(filepath.Join(n.root, "pki", src))
		f := byName[dst]
		if !bytes.Equal(f.Data, want) || f.Secret != strings.HasSuffix(dst, ".key") || (f.Mode == 0o600) != strings.HasSuffix(dst, ".key") {
			t.Errorf("%s: not a copy of %s with mode %v secret %v", dst, src, f.Mode, f.Secret)
		}
		delete(byName, dst)
	}
	// What is left is the client certificate and its key, and nothing else.
	crt, key := byName["skewgate/skewgate/skewgate.crt"], byName["skewgate/skewgate/skewgate.key"]
	if len(byName) != 2 || crt.Data == nil || key.Data == nil {
		t.Fatalf("unexpected files %v", byName)
	}
	if key.Mode != 0o600 || !key.Secret || crt.Secret {
		t.Errorf("key mode %v secret %v", key.Mode, key.Secret)
	}
	certs, err := certutil.ParseCertsPEM(crt.Data)
	if err != nil {
		t.Fatal(err)
	}
	c := certs[0]
	if c.Subject.CommonName != User || len(c.Subject.Organization) != 0 {
		t.Errorf("subject %v: want CN=skewgate and no group", c.Subject)
	}
	if err := c.CheckSignatureFrom(n.ca); err != nil {
		t.Errorf("not signed by the cluster CA: %v", err)
	}
	if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || c.IsCA {
		t.Errorf("usages %v, CA %v: want client auth only", c.ExtKeyUsage, c.IsCA)
	}
	if !c.NotAfter.Equal(testNow.Add(certValidity)) {
		t.Errorf("expires %v, want a year after %v", c.NotAfter, testNow)
	}
}

func TestApplyIdempotent(t *testing.T) {
	n := installed(t)
	before := snapshot(t, n.root)
	for _, rel := range []string{"skewgate/skewgate/skewgate.key", "skewgate/skewgate/kubeconfig", "skewgate/envoy/apiserver.key", "manifests/skewgate.yaml"} {
		if st, err := os.Stat(filepath.Join(n.root, rel)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", rel, st.Mode(), err)
		}
	}
	for _, dir := range []string{"sockets", "skewgate/skewgate", "skewgate/envoy"} {
		if st, err := os.Stat(filepath.Join(n.root, dir)); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v (%v), want 0700", dir, st.Mode(), err)
		}
	}
	time.Sleep(10 * time.Millisecond) // so that a rewrite would show in the modification times

	again, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if again.Issued {
		t.Error("a good certificate was issued again")
	}
	changes, err := Apply(again, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.Action != "unchanged" {
			t.Errorf("second run: %s %s", c.Action, c.Path)
		}
	}
	after := snapshot(t, n.root)
	for p, v := range before {
		if after[p] != v {
			t.Errorf("second run touched %s", p)
		}
	}
	if len(after) != len(before) {
		t.Errorf("second run: %d paths, first %d", len(after), len(before))
	}
}

func TestApplyFixesMode(t *testing.T) {
	n := newNode(t)
	plan, _ := Render(n.options())
	if _, err := Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(n.root, "skewgate", "skewgate", "skewgate.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	changes, err := Apply(plan, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("key left at %v", st.Mode())
	}
	for _, c := range changes {
		if (c.Path == key) != (c.Action == "chmod") {
			t.Errorf("%s %s", c.Action, c.Path)
		}
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	n := newNode(t)
	before := snapshot(t, n.root)
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	changes, err := Apply(plan, true, &out)
	if err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, n.root)
	if len(after) != len(before) {
		t.Errorf("dry run created %d paths", len(after)-len(before))
	}
	for p, v := range before {
		if after[p] != v {
			t.Errorf("dry run changed %s", p)
		}
	}
	s := out.String()
	for _, f := range plan.Files {
		if !strings.Contains(s, "# would create "+f.Path+" ") {
			t.Errorf("dry run does not show %s", f.Path)
		}
	}
	var keyPEM []byte
	for _, f := range plan.Files {
		if f.Secret {
			keyPEM = f.Data
		}
	}
	body := strings.Split(string(keyPEM), "\n")[1]
	if strings.Contains(s, body) || !strings.Contains(s, "(redacted)") {
		t.Errorf("dry run shows the private key:\n%s", s)
	}
	if len(changes) != len(plan.Files)+len(plan.Dirs) {
		t.Errorf("%d changes for %d paths", len(changes), len(plan.Files)+len(plan.Dirs))
	}
}

// A certificate that is not good for skewgate is replaced; one that is, is kept.
func TestClientCertificateReissue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		subject  pkix.Name
		notAfter time.Duration
		otherCA  bool
		reissue  bool
	}{
		// The node's certificates (newNode) expire in 364 days.
		{"good", pkix.Name{CommonName: User}, 364 * 24 * time.Hour, false, false},
		{"another user", pkix.Name{CommonName: "admin"}, 364 * 24 * time.Hour, false, true},
		{"in a group", pkix.Name{CommonName: User, Organization: []string{"system:masters"}}, 364 * 24 * time.Hour, false, true},
		{"expiring", pkix.Name{CommonName: User}, 10 * 24 * time.Hour, false, true},
		{"older than kubeadm's renewal", pkix.Name{CommonName: User}, 300 * 24 * time.Hour, false, true},
		{"another CA", pkix.Name{CommonName: User}, 364 * 24 * time.Hour, true, true},
		// Issued by an older release, which took the lifetime from apiserver.crt.
		{"longer than a year", pkix.Name{CommonName: User}, 5 * 365 * 24 * time.Hour, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.issue(t, tc.subject, testNow.Add(tc.notAfter), tc.otherCA)
			old, _ := os.ReadFile(filepath.Join(n.root, "skewgate", "skewgate", "skewgate.crt"))
			plan, err := Render(n.options())
			if err != nil {
				t.Fatal(err)
			}
			if plan.Issued != tc.reissue {
				t.Errorf("issued %v, want %v", plan.Issued, tc.reissue)
			}
			var got []byte
			for _, f := range plan.Files {
				if strings.HasSuffix(f.Path, "/skewgate.crt") {
					got = f.Data
				}
			}
			if same := bytes.Equal(got, old); same == tc.reissue {
				t.Errorf("certificate kept: %v, want %v", same, !tc.reissue)
			}
		})
	}
}

// TestKubernetesEndpointsRBACGolden: `skewgate kubeadm rbac --kubernetes-endpoints` adds the writes
// of the kubernetes Service mode and nothing else; without it the RBAC is the install's.
func TestKubernetesEndpointsRBACGolden(t *testing.T) {
	y, err := RBACYAMLFor(true)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, &node{root: "/no-node-root"}, "rbac-kubernetes-endpoints.yaml", y)
	plain, err := RBACYAML()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(y, plain) {
		t.Error("the mode's RBAC does not start with discovery's")
	}
	if bytes.Contains(plain, []byte("endpoints\n")) || bytes.Contains(plain, []byte("update")) {
		t.Error("the RBAC without the mode grants the mode's writes")
	}
}
