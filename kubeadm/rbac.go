package kubeadm

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// RBAC returns the objects that let User run discovery, and nothing else. Every rule matches a read
// discovery makes (discovery/informers.go, discovery/fetch.go):
//   - identity Leases in kube-system: list and watch (an informer; it never gets one by name, and no
//     resourceNames can be given: the Lease names are hashes);
//   - the default/kubernetes EndpointSlice: list and watch, by name (the informer selects it with
//     fieldSelector metadata.name=kubernetes, which RBAC matches against resourceNames);
//   - CRD and APIService metadata: list and watch cluster-wide (a change refetches discovery);
//   - each apiserver's discovery, version and readiness: get on those non-resource URLs.
//
// It writes nothing and reads no Secret, Pod or ConfigMap.
func RBAC() []runtime.Object {
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: User}}
	listWatch := []string{"list", "watch"}
	role := func(ns, name string, rule rbacv1.PolicyRule) []runtime.Object {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
		return []runtime.Object{
			&rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: meta, Rules: []rbacv1.PolicyRule{rule}},
			&rbacv1.RoleBinding{TypeMeta: typeMeta("RoleBinding"), ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
		}
	}
	out := role("kube-system", "skewgate:leases", rbacv1.PolicyRule{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: listWatch,
	})
	out = append(out, role("default", "skewgate:endpointslices", rbacv1.PolicyRule{
		APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
		ResourceNames: []string{"kubernetes"}, Verbs: listWatch,
	})...)
	meta := metav1.ObjectMeta{Name: "skewgate:discovery", Labels: labels}
	return append(out,
		&rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: listWatch},
			{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: listWatch},
			{NonResourceURLs: []string{"/api", "/apis", "/version", "/readyz"}, Verbs: []string{"get"}},
		}},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("ClusterRoleBinding"), ObjectMeta: meta, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: meta.Name}},
	)
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
}

// labels mark everything the command renders.
var labels = map[string]string{"app.kubernetes.io/name": "skewgate", "app.kubernetes.io/managed-by": "skewgate-kubeadm"}
