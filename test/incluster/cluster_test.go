package incluster

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/test/netns"
	"github.com/skewgate/skewgate/test/testbed"
)

// Resource names of the skewed API: served by v1.36 only.
const (
	mapResource = "mutatingadmissionpolicies"
	mapGroup    = "admissionregistration.k8s.io"
)

// cluster is a testbed on real addresses with kube-proxy programming the `kubernetes` Service.
type cluster struct {
	tb    *testbed.Testbed
	admin kubernetes.Interface
	kp    *testbed.KubeProxy
	// endpoints are the `kubernetes` EndpointSlice's addresses kube-proxy started from.
	endpoints []string
}

// startCluster starts the default skewed pair in Network mode inside the test's namespace, waits
// until the `kubernetes` EndpointSlice lists both apiservers, then starts kube-proxy and waits until
// the ClusterIP answers.
func startCluster(t *testing.T) *cluster { return startClusterWith(t, false) }

// startClusterWith is startCluster; with noReconciler every apiserver runs
// --endpoint-reconciler-type=none, as the kubernetes-endpoints mode needs, and the admin writes the
// `kubernetes` Endpoints and EndpointSlice as the apiservers' lease reconciler left them in a cluster
// that ran it before the change (adminEndpoints).
func startClusterWith(t *testing.T, noReconciler bool) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs root, the testbed binaries and kube-proxy (make testbed-bins)")
	}
	netns.Require(t)
	specs := testbed.DefaultApiservers()
	reconciler := "lease endpoint reconciler on"
	if noReconciler {
		for i := range specs {
			specs[i].ExtraFlags = append(specs[i].ExtraFlags, "--endpoint-reconciler-type=none")
		}
		reconciler = "--endpoint-reconciler-type=none"
	}
	tb := testbed.StartT(t, testbed.Config{Network: netns.Subnet, Apiservers: specs})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	neu := tb.MustApiserver("new")
	admin := kubernetes.NewForConfigOrDie(tb.RESTConfig(neu.URL(), testbed.AdminByToken))
	var want []string
	for _, a := range tb.Apiservers() {
		want = append(want, a.IP.String())
		t.Logf("part: apiserver %q %s at %s, %s (advertises %s)", a.Name, a.Version, a.URL(), reconciler, a.IP)
	}
	slices.Sort(want)
	writer := "the apiservers' own reconciler"
	if noReconciler {
		if err := adminEndpoints(ctx, admin, want); err != nil {
			t.Fatal(err)
		}
		writer = "the admin, as the lease reconciler left them"
	}
	var got []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := admin.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
		if err != nil {
			return false, nil // the apiserver may still be starting its informers; the poll's deadline bounds this
		}
		got = sliceAddresses(list.Items)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("the kubernetes EndpointSlice never listed every apiserver: got %v, want %v: %v", got, want, err)
	}
	t.Logf("part: EndpointSlice default/kubernetes (written by %s) lists %v port %d", writer, got, testbed.APIServerPort)
	kp, err := tb.StartKubeProxy(ctx, testbed.KubeProxyOptions{NodeIP: netns.HostAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- last log lines of kube-proxy ----\n%s", kp.LogTail(30))
		}
	})
	// The ClusterIP may answer before this kube-proxy synced: an earlier test of this process leaves its
	// kube-proxy's rules in the namespace (same chains, same addresses), perhaps with other endpoints.
	if _, err := waitDNAT(ctx, want); err != nil {
		t.Fatal(err)
	}
	t.Logf("part: kube-proxy %s (iptables mode, node %s at %s) programs the ClusterIP %s:443 to those endpoints, one pick per connection",
		testbed.NewVersion, kp.Node, netns.HostAddr, testbed.KubernetesServiceIP)
	return &cluster{tb: tb, admin: admin, kp: kp, endpoints: got}
}

// sliceAddresses lists every endpoint address of the slices, sorted.
func sliceAddresses(items []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range items {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

// serviceAccountClient creates a ServiceAccount allowed to list the skewed resource (and nothing
// else), waits until every apiserver's authorizer agrees, and returns a client configured as
// rest.InClusterConfig configures one in a pod of that account: host from KUBERNETES_SERVICE_HOST and
// _PORT (the ClusterIP), the projected token file, the cluster CA; its transport opens a new
// connection for every request, so kube-proxy picks an endpoint per request.
func (c *cluster) serviceAccountClient(t *testing.T, ns, name string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(c.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
	role := ns + "-" + name + "-" + mapResource + "-reader"
	must(c.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{mapGroup}, Resources: []string{mapResource}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}))
	must(c.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{}))
	tr, err := c.admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	user := "system:serviceaccount:" + ns + ":" + name
	// Without this a request could meet an apiserver whose RBAC cache lacks the binding: a 403, not
	// the 404 under test.
	for _, a := range c.tb.Apiservers() {
		cs := kubernetes.NewForConfigOrDie(c.tb.RESTConfig(a.URL(), testbed.AdminByToken))
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: mapGroup, Resource: mapResource},
			}}, metav1.CreateOptions{})
			return err == nil && r.Status.Allowed, nil
		})
		if err != nil {
			t.Fatalf("apiserver %s never allowed %s to list %s: %v", a.Name, user, mapResource, err)
		}
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	// As rest.InClusterConfig (client-go rest/config.go) builds it, with the ClusterIP for
	// KUBERNETES_SERVICE_HOST; only the paths differ, and client-side throttling is off for the test.
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(testbed.KubernetesServiceIP, strconv.Itoa(443)),
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.tb.PKI.CA.Cert},
		BearerTokenFile: tokenFile,
		QPS:             -1,
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return connectionPerRequest{rt} })
	t.Logf("part: in-cluster client %s (client-go, rest.InClusterConfig's shape: %s, token file, cluster CA), a new connection per request", user, cfg.Host)
	return cfg, kubernetes.NewForConfigOrDie(cfg)
}

// connectionPerRequest closes every connection after its response (Request.Close), so each request
// dials the ClusterIP anew: kube-proxy's iptables rules pick an endpoint per connection, and a
// short-lived client (a CronJob, a restarted controller, a client behind a connection-capping proxy)
// reconnects as often.
type connectionPerRequest struct{ next http.RoundTripper }

func (c connectionPerRequest) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Close = true
	return c.next.RoundTrip(r)
}
