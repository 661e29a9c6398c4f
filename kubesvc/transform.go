package kubesvc

import (
	"crypto/sha256"
	"encoding/hex"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxHolderLen bounds the holderIdentity kept: longer ones are kept as their SHA-256 (a renewal is
// still seen to change).
const maxHolderLen = 253

// slimLease is the informer transform of member Leases: the cache keeps what a reconcile reads, so
// what a Lease writer puts in a Lease (annotations up to 256 KiB, managedFields, any label) does
// not stay in memory: name, namespace, resourceVersion, the member label, the endpoint annotation
// when it is no longer than maxAnnotationLen (a longer one is dropped: the Lease is then malformed
// for lack of it), creationTimestamp, and of the spec the holder, duration and renewal.
func slimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil // a tombstone: its object was transformed when it was stored
	}
	out := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion,
			CreationTimestamp: l.CreationTimestamp},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: l.Spec.LeaseDurationSeconds, RenewTime: l.Spec.RenewTime},
	}
	if v, ok := l.Labels[MemberLabel]; ok {
		out.Labels = map[string]string{MemberLabel: v}
	}
	if v, ok := l.Annotations[EndpointAnnotation]; ok && len(v) <= maxAnnotationLen {
		out.Annotations = map[string]string{EndpointAnnotation: v}
	}
	if h := l.Spec.HolderIdentity; h != nil {
		s := *h
		if len(s) > maxHolderLen {
			sum := sha256.Sum256([]byte(s))
			s = "sha256:" + hex.EncodeToString(sum[:])
		}
		out.Spec.HolderIdentity = &s
	}
	return out, nil
}
