// Package kubeadm renders the co-located deployment of skewgate on a kubeadm control-plane node:
// two static pods (skewgate and Envoy, talking over unix sockets in a root-only directory), Envoy's
// bootstrap, skewgate's kubeconfig and client certificate issued from the cluster CA, and the RBAC
// that certificate needs. Render is pure but for reading the node's PKI and the files it would
// replace; Apply writes only what changed, so running it twice changes nothing, and never through a
// symlink (nofollow.go). It never reads or writes anything through the apiserver: applying the RBAC
// is the operator's step.
package kubeadm
