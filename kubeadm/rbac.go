package kubeadm

import (
	corev1 "k8s.io/api/core/v1"
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
// It writes nothing and reads no Secret, Pod or ConfigMap. With kubernetesEndpoints (`skewgate serve
// --kubernetes-endpoints`) it adds exactly what package kubesvc does, see kubernetesEndpointsRBAC.
func RBAC(kubernetesEndpoints bool) []runtime.Object {
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: User}}
	role := func(ns, name string, rules ...rbacv1.PolicyRule) []runtime.Object {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
		return []runtime.Object{
			&rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: meta, Rules: rules},
			&rbacv1.RoleBinding{TypeMeta: typeMeta("RoleBinding"), ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
		}
	}
	out := discoveryRBAC(role, subjects)
	if kubernetesEndpoints {
		out = append(out, kubernetesEndpointsRBAC(role)...)
	}
	return out
}

// roleFunc renders a Role with its RoleBinding to User.
type roleFunc func(ns, name string, rules ...rbacv1.PolicyRule) []runtime.Object

func discoveryRBAC(role roleFunc, subjects []rbacv1.Subject) []runtime.Object {
	listWatch := []string{"list", "watch"}
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

// KubernetesEndpointsNamespace is kubesvc.Namespace (kubeadm does not link the runtime): where the
// member Leases live.
const KubernetesEndpointsNamespace = "skewgate"

// kubernetesEndpointsRBAC is what `serve --kubernetes-endpoints` needs beyond discovery:
//   - Endpoints and EndpointSlice default/kubernetes: get, list and watch (informers with
//     fieldSelector metadata.name=kubernetes) and update and patch, by resourceNames: no other object
//     of default. No create (RBAC cannot restrict create to a name: the objects must exist) and no
//     delete;
//   - the namespace skewgate, holding only the member Leases, and there leases: get, list, watch,
//     create (its own, on first heartbeat), update and delete (its own, on shutdown). Anyone bound
//     there can claim membership, which is why each member address is checked (docs/security.md).
func kubernetesEndpointsRBAC(role roleFunc) []runtime.Object {
	out := []runtime.Object{&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: KubernetesEndpointsNamespace, Labels: labels}}}
	verbs := []string{"get", "list", "watch", "update", "patch"}
	out = append(out, role("default", "skewgate:kubernetes-endpoints",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, ResourceNames: []string{"kubernetes"}, Verbs: verbs},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, ResourceNames: []string{"kubernetes"}, Verbs: verbs},
	)...)
	return append(out, role(KubernetesEndpointsNamespace, "skewgate:member-leases", rbacv1.PolicyRule{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "watch", "create", "update", "delete"},
	})...)
}
