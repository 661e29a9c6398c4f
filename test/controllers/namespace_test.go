package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/artifact"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// workloads is a namespaced resource only the new apiserver serves in this skew: v1.36 with the
// alpha API scheduling.k8s.io/v1alpha2 turned on (as an operator turns on a new API with the upgrade),
// v1.35 without it.
var workloads = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}

// skewedFlags turn workloads on in the new apiserver.
var skewedFlags = []string{"--runtime-config=scheduling.k8s.io/v1alpha2=true", "--feature-gates=GenericWorkload=true"}

const (
	// perNamespace is how many objects of each kind a namespace holds when it is deleted.
	perNamespace = 3
	// finalizeBound is how long the namespace controller has to finalize a deleted namespace.
	finalizeBound = 2 * time.Minute
)

// TestControllerManagerThroughTheFront runs the real kube-controller-manager (v1.35, the version a
// node that is not upgraded yet runs) twice during a skew in which only the v1.36 apiserver serves a
// namespaced resource. Each time the garbage collector must delete the dependents of a deleted owner
// of that resource and keep those of a live one (garbageCollect), and the namespace controller must
// empty a deleted namespace holding objects of it:
//   - against its local apiserver (the v1.35 one, as kubeadm's controller-manager.conf names it): the
//     namespace controller's discovery lacks the resource, so it finalizes the namespace and leaves
//     every such object in etcd, in a namespace that no longer exists, and the garbage collector
//     never collects the dependents of the deleted owner;
//   - through the front (skewgate's merged discovery, each request routed to an apiserver serving it),
//     and through a front failing open (its Envoy cannot reach ext_proc, so discovery is the most
//     capable apiserver's and every request takes Envoy's route table): both delete everything
//     they should, and nothing else.
//
// Objects every apiserver serves (configmaps) are deleted in both runs: proof that the controller ran.
func TestControllerManagerThroughTheFront(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{
		{Name: "old", Version: testbed.OldVersion},
		{Name: "new", Version: testbed.NewVersion, ExtraFlags: skewedFlags},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFront(ctx, t, tb, front.Options{})
	// A second front whose Envoy cannot reach ext_proc: every request takes the route table skewgate
	// sent it (failing open), discovery included.
	failOpen := startFront(ctx, t, tb, front.Options{Host: 2, ExtProcDown: true})
	newAPI := tb.MustApiserver("new")
	admin := tb.RESTConfig(newAPI.URL(), testbed.AdminByToken)
	cs := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	waitServed(ctx, t, tb, f)
	waitServed(ctx, t, tb, failOpen)

	local := deleteNamespace(ctx, t, tb, cs, dyn, "local", tb.MustApiserver("old").URL())
	through := deleteNamespace(ctx, t, tb, cs, dyn, "front", f.URL)
	open := deleteNamespace(ctx, t, tb, cs, dyn, "failopen", failOpen.URL)
	t.Logf("kube-controller-manager %s, namespace deletion with %d %s and %d configmaps: against its local v1.35 apiserver %d %s left in etcd (%v); through the front %d left (%v); through a front failing open (no ext_proc) %d left (%v)",
		testbed.OldVersion, perNamespace, workloads.Resource, perNamespace, local.left, workloads.Resource, local.took, through.left, through.took, open.left, open.took)
	if local.left != perNamespace {
		t.Errorf("against the local v1.35 apiserver %d of %d %s were left; want all of them (the harm this test shows)", local.left, perNamespace, workloads.Resource)
	}
	for _, r := range []run{through, open} {
		if r.left != 0 {
			t.Errorf("%s run: %d of %d %s were left in a deleted namespace; want 0", r.name, r.left, perNamespace, workloads.Resource)
		}
		if r.gc.Uncollected != 0 {
			t.Errorf("%s run: %d of %d dependents of a deleted owner were left after %v; want 0", r.name, r.gc.Uncollected, perNamespace, collectBound)
		}
	}
	for _, r := range []run{local, through, open} {
		if r.configMapsLeft != 0 {
			t.Errorf("%s run: %d configmaps left: the namespace controller did not run", r.name, r.configMapsLeft)
		}
		if r.gc.WrongDeletions != 0 {
			t.Errorf("%s run: the garbage collector deleted %d dependents of a live owner", r.name, r.gc.WrongDeletions)
		}
	}
	artifact.Write(t, f.DataPlane, map[string]any{
		"controller_manager_version": testbed.OldVersion,
		"apiserver_versions":         map[string]string{"old": testbed.OldVersion, "new": testbed.NewVersion},
		"resource":                   workloads.Resource + "." + workloads.Group + "/" + workloads.Version,
		"objects_per_namespace":      perNamespace,
		"local_left":                 local.left,
		"local_configmaps_left":      local.configMapsLeft,
		"local_finalize_ms":          local.took.Milliseconds(),
		"front_left":                 through.left,
		"front_configmaps_left":      through.configMapsLeft,
		"front_finalize_ms":          through.took.Milliseconds(),
		"gc_dependents_per_owner":    perNamespace,
		"gc_collect_bound_ms":        collectBound.Milliseconds(),
		"local_gc":                   local.gc,
		"front_gc":                   through.gc,
		"front_gc_collect_ms":        through.gc.Took.Milliseconds(),
		"failopen_left":              open.left,
		"failopen_configmaps_left":   open.configMapsLeft,
		"failopen_gc":                open.gc,
	})
}

type run struct {
	name           string
	left           int
	configMapsLeft int
	took           time.Duration
	gc             gcResult
}

// deleteNamespace starts kube-controller-manager with server in its kubeconfig, fills a namespace
// through the new apiserver, deletes it, waits until the namespace controller has finalized it and
// counts what is left of it in etcd (read through the new apiserver, which serves both kinds).
func deleteNamespace(ctx context.Context, t *testing.T, tb *testbed.Testbed, cs kubernetes.Interface, dyn dynamic.Interface, name, server string) run {
	t.Helper()
	cm, err := tb.StartControllerManager(ctx, testbed.ControllerManagerOptions{Server: server, Name: "kcm-" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Stop()
	gc := garbageCollect(ctx, t, cs, dyn, "owners-"+name)
	t.Logf("%s run: garbage collector: %d of %d dependents of a live owner deleted, %d of %d dependents of a deleted owner left after %v",
		name, gc.WrongDeletions, perNamespace, gc.Uncollected, perNamespace, gc.Took.Round(time.Millisecond))
	ns := "skewed-" + name
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range perNamespace {
		if _, err := dyn.Resource(workloads).Namespace(ns).Create(ctx, workload(fmt.Sprintf("w%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s in %s: %v", workloads.Resource, ns, err)
		}
		cmap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cmap, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, finalizeBound, true, func(ctx context.Context) (bool, error) {
		if err := cm.Exited(); err != nil {
			return false, err
		}
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s run: namespace %s not finalized within %v: %v; kube-controller-manager's log:\n%s", name, ns, finalizeBound, err, cm.LogTail(40))
	}
	wl, err := dyn.Resource(workloads).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s run (kube-controller-manager's kubeconfig names %s): namespace %s finalized after %v; left in etcd: %d %s, %d configmaps",
		name, server, ns, took.Round(time.Millisecond), len(wl.Items), workloads.Resource, len(cms.Items))
	return run{name: name, left: len(wl.Items), configMapsLeft: len(cms.Items), took: took, gc: gc}
}

// waitServed waits until the front's merged discovery lists workloads: before that, a namespace
// controller through the front could not know the resource either.
func waitServed(ctx context.Context, t *testing.T, tb *testbed.Testbed, f *front.Front) {
	t.Helper()
	dc := kubernetes.NewForConfigOrDie(tb.RESTConfig(f.URL, testbed.AdminByToken)).Discovery()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		rl, err := dc.ServerResourcesForGroupVersion(workloads.GroupVersion().String())
		if err != nil {
			return false, nil
		}
		for _, r := range rl.APIResources {
			if r.Name == workloads.Resource {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the front's discovery never listed %s: %v", workloads, err)
	}
}

// startFront starts a front before the testbed and says what serves it.
func startFront(ctx context.Context, t *testing.T, tb *testbed.Testbed, o front.Options) *front.Front {
	t.Helper()
	o.Dir, o.Errorf, o.Logf = t.TempDir(), t.Errorf, t.Logf
	o.Logger = zaptest.NewLogger(t).Named("skewgate")
	f, err := front.Start(ctx, tb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if f.DataPlane == "envoy" {
		t.Logf("front %s served by Envoy (ENVOY_BIN is set)", f.URL)
	} else {
		t.Logf("ENVOY_BIN is unset: front %s ran on the %s (test/dataplane), not on Envoy", f.URL, f.DataPlane)
	}
	return f
}
