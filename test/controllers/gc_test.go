package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// collectBound is how long the garbage collector has to delete the dependents of a deleted owner.
const collectBound = 30 * time.Second

// gcResult is what the garbage collector did with dependents (configmaps) owned by workloads.
type gcResult struct {
	// WrongDeletions are dependents of a live owner that were deleted.
	WrongDeletions int `json:"wrong_deletions"`
	// Uncollected are dependents of a deleted owner still there after collectBound.
	Uncollected int           `json:"uncollected"`
	Took        time.Duration `json:"-"`
}

// garbageCollect creates two workloads in ns, each owning perNamespace configmaps, deletes one of
// them and waits up to collectBound for the garbage collector to delete that one's dependents. Both
// owners are of a kind only the new apiserver serves: a collector that reads an owner through an
// apiserver that does not serve it gets a 404 and takes the owner for gone (isDangling in
// pkg/controller/garbagecollector), one whose discovery lacks the kind never collects its dependents.
func garbageCollect(ctx context.Context, t *testing.T, cs kubernetes.Interface, dyn dynamic.Interface, ns string) gcResult {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner := func(name string) *unstructured.Unstructured {
		w, err := dyn.Resource(workloads).Namespace(ns).Create(ctx, workload(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s %s/%s: %v", workloads.Resource, ns, name, err)
		}
		for i := range perNamespace {
			ref := metav1.OwnerReference{APIVersion: workloads.GroupVersion().String(), Kind: "Workload", Name: w.GetName(), UID: w.GetUID()}
			cmap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), OwnerReferences: []metav1.OwnerReference{ref}}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cmap, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}
	owner("live")
	gone := owner("gone")
	start := time.Now()
	background := metav1.DeletePropagationBackground
	if err := dyn.Resource(workloads).Namespace(ns).Delete(ctx, gone.GetName(), metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	var left map[string]int
	count := func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = map[string]int{}
		for _, c := range l.Items {
			if len(c.OwnerReferences) > 0 {
				left[strings.SplitN(c.Name, "-", 2)[0]]++
			}
		}
		return left["gone"] == 0, nil
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, collectBound, true, count)
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
	if _, err := count(ctx); err != nil {
		t.Fatal(err)
	}
	return gcResult{WrongDeletions: perNamespace - left["live"], Uncollected: left["gone"], Took: time.Since(start)}
}

// workload is a minimal scheduling.k8s.io/v1alpha2 Workload.
func workload(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": workloads.GroupVersion().String(), "kind": "Workload",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"podGroupTemplates": []any{map[string]any{"name": "group", "schedulingPolicy": map[string]any{"basic": map[string]any{}}}}},
	}}
}
