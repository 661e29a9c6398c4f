package testbed_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/testbed"
)

const (
	identityLabel   = "apiserver.kubernetes.io/identity=kube-apiserver"
	peerAddressAnno = "kubernetes.io/peer-advertise-address"
)

// TestDefaultTestbed checks the facts every other integration test rests on: the
// identity Lease contract and the served-API difference between v1.35 and v1.36.
func TestDefaultTestbed(t *testing.T) {
	tb := testbed.StartT(t, testbed.Config{})
	ctx := context.Background()
	old, neu := tb.MustApiserver("old"), tb.MustApiserver("new")

	t.Run("versions", func(t *testing.T) {
		for _, a := range []testbed.Apiserver{old, neu} {
			cs := kubernetes.NewForConfigOrDie(tb.RESTConfig(a.URL(), testbed.AdminByToken))
			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if v.GitVersion != a.Version {
				t.Errorf("%s: /version says %s, want %s", a.Name, v.GitVersion, a.Version)
			}
		}
	})

	t.Run("identity leases", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(tb.RESTConfig(neu.URL(), testbed.AdminByToken))
		// Each apiserver writes its Lease from a post-start hook; wait until both exist.
		var leases *coordinationv1.LeaseList
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			leases, err = cs.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: identityLabel})
			return err == nil && len(leases.Items) >= 2, err
		})
		if err != nil {
			t.Fatalf("identity leases: %v", err)
		}
		byHost := map[string]string{} // hostname -> annotation
		names := map[string]bool{}
		for _, l := range leases.Items {
			byHost[l.Labels["kubernetes.io/hostname"]] = l.Annotations[peerAddressAnno]
			names[l.Name] = true
		}
		if len(leases.Items) != 2 || len(names) != 2 {
			t.Fatalf("want 2 identity leases with distinct names, got %d: %v", len(leases.Items), names)
		}
		if got, ok := byHost["new"]; !ok || got != neu.Address() {
			t.Errorf("v1.36 lease annotation = %q (present %v), want %q", got, ok, neu.Address())
		}
		if got, ok := byHost["old"]; !ok || got != "" {
			t.Errorf("v1.35 lease: present %v, annotation %q; want present without annotation", ok, got)
		}
	})

	t.Run("nopeer discovery", func(t *testing.T) {
		hc, err := tb.AdminHTTPClient()
		if err != nil {
			t.Fatal(err)
		}
		if !servesMAP(t, hc, neu) {
			t.Error("v1.36 does not list admissionregistration.k8s.io/v1 mutatingadmissionpolicies")
		}
		if servesMAP(t, hc, old) {
			t.Error("v1.35 lists admissionregistration.k8s.io/v1 mutatingadmissionpolicies")
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		// What a round-robin front hands a client half of the time.
		out, err := kubectl(tb, "old", "get", "--raw", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
		if err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("kubectl against v1.35: err=%v, output %q; want NotFound", err, out)
		}
		out, err = kubectl(tb, "old", "get", "mutatingadmissionpolicies")
		if err == nil || !strings.Contains(out, `doesn't have a resource type "mutatingadmissionpolicies"`) {
			t.Errorf("kubectl get against v1.35: err=%v, output %q; want an unknown resource type", err, out)
		}
		if out, err := kubectl(tb, "new", "get", "mutatingadmissionpolicies"); err != nil || !strings.Contains(out, "No resources found") {
			t.Errorf("kubectl against v1.36: %v: %s", err, out)
		}
	})

	t.Run("kill and start", func(t *testing.T) {
		if err := tb.Kill("new"); err != nil {
			t.Fatal(err)
		}
		if a := tb.MustApiserver("new"); a.PID != 0 {
			t.Fatalf("pid after kill = %d", a.PID)
		}
		hc, _ := tb.AdminHTTPClient()
		if _, err := hc.Get(neu.URL() + "/readyz"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("GET /readyz of the killed apiserver: %v, want connection refused (nothing listens)", err)
		}
		if err := tb.Start(ctx, "new"); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(neu.URL() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("readyz after restart: %d", resp.StatusCode)
		}
	})

	t.Run("replace upgrades in place", func(t *testing.T) {
		if err := tb.Replace(ctx, "old", testbed.NewVersion); err != nil {
			t.Fatal(err)
		}
		a := tb.MustApiserver("old")
		cs := kubernetes.NewForConfigOrDie(tb.RESTConfig(a.URL(), testbed.AdminByCert))
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != testbed.NewVersion || a.Version != testbed.NewVersion || a.Address() != old.Address() {
			t.Errorf("after Replace: /version %s, snapshot %+v; want %s at %s", v.GitVersion, a, testbed.NewVersion, old.Address())
		}
		hc, _ := tb.AdminHTTPClient()
		if !servesMAP(t, hc, a) {
			t.Error("the upgraded apiserver does not serve mutatingadmissionpolicies")
		}
	})
}

// servesMAP reports whether a's local (profile=nopeer) aggregated discovery lists
// admissionregistration.k8s.io/v1 mutatingadmissionpolicies.
func servesMAP(t *testing.T, hc *http.Client, a testbed.Apiserver) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.URL()+"/apis", nil)
	req.Header.Set("Accept", discovery.AcceptV2NoPeer)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "as=APIGroupDiscoveryList") {
		t.Fatalf("%s: /apis content type %q, want aggregated discovery", a.Name, ct)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 10 {
		t.Fatalf("%s: only %d groups in /apis", a.Name, len(list.Items))
	}
	for _, g := range list.Items {
		if g.Name != "admissionregistration.k8s.io" {
			continue
		}
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				if v.Version == "v1" && r.Resource == "mutatingadmissionpolicies" {
					return true
				}
			}
		}
	}
	return false
}

func kubectl(tb *testbed.Testbed, context string, args ...string) (string, error) {
	args = append([]string{"--kubeconfig", tb.AdminTokenKubeconfig(), "--context", context}, args...)
	out, err := exec.Command("kubectl", args...).CombinedOutput()
	return string(out), err
}
