package incluster

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/artifact"
	"github.com/skewgate/skewgate/test/testbed"
)

// todayRequests is how many skewed lists the in-cluster client makes, each on a new connection.
const todayRequests = 200

// todayMin404 is the fewest wrong 404s (and todayRequests minus it the most) an even spread over the
// two apiservers gives, by far.
const todayMin404 = 60

// TestInClusterClientsToday measures the harm issue 25 is about, with nothing of skewgate in the
// path: an in-cluster client lists a resource only the v1.36 apiserver serves, through the
// `kubernetes` ClusterIP that the real kube-proxy balances over both apiservers' own addresses. The
// share of wrong 404s must be neither 0 (then the old apiserver was never reached and the test
// proves nothing) nor every request (then the new one never was).
func TestInClusterClientsToday(t *testing.T) {
	c := startCluster(t)
	_, cs := c.serviceAccountClient(t, "operators", "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var served, notFound, failed int
	start := time.Now()
	for i := range todayRequests {
		_, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			served++
		case apierrors.IsNotFound(err):
			notFound++
		default:
			failed++
			t.Logf("request %d: %v", i, err)
		}
	}
	took := time.Since(start)
	versions := versionSplit(t, cs, 50)
	share := float64(notFound) / todayRequests
	t.Logf("in-cluster client through the ClusterIP, today: %d of %d lists of %s answered a wrong 404 (%.0f%%), %d served, %d other failures, in %v; /version on 50 new connections: %v",
		notFound, todayRequests, mapResource, 100*share, served, failed, took.Round(time.Millisecond), versions)
	artifact.Write(t, "kube-proxy "+testbed.NewVersion+" iptables mode over the apiservers' own endpoints (no front)", map[string]any{
		"requests":             todayRequests,
		"wrong_404":            notFound,
		"wrong_404_share":      share,
		"served":               served,
		"other_failures":       failed,
		"seconds":              took.Seconds(),
		"endpoints":            c.endpoints,
		"cluster_ip":           testbed.KubernetesServiceIP,
		"version_sample":       versions,
		"kube_proxy_version":   testbed.NewVersion,
		"apiserver_versions":   map[string]string{"old": testbed.OldVersion, "new": testbed.NewVersion},
		"connection_per_call":  true,
		"skewed_resource":      mapResource + "." + mapGroup,
		"service_account_user": "system:serviceaccount:operators:operator",
	})
	if failed != 0 {
		t.Errorf("%d requests failed with something other than a 404, want none", failed)
	}
	// kube-proxy's iptables mode picks one of the two endpoints at random per connection (a
	// `statistic --mode random --probability 0.5` rule), so the wrong 404s are binomial(200, 1/2):
	// mean 100, standard deviation about 7; 60 to 140 is more than 5 deviations either way.
	if notFound < todayMin404 || notFound > todayRequests-todayMin404 {
		t.Errorf("wrong 404s: %d of %d, want %d to %d: kube-proxy should spread new connections evenly over both apiservers", notFound, todayRequests, todayMin404, todayRequests-todayMin404)
	}
	if versions[testbed.OldVersion] == 0 || versions[testbed.NewVersion] == 0 {
		t.Errorf("/version through the ClusterIP: %v, want both apiservers", versions)
	}
}

// versionSplit asks /version n times through the client, each on a new connection, and counts the
// answers by gitVersion: which apiservers kube-proxy sends new connections to.
func versionSplit(t *testing.T, cs kubernetes.Interface, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Errorf("/version through the ClusterIP: %v", err)
			continue
		}
		out[v.GitVersion]++
	}
	return out
}
