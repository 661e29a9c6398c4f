// Package controllers holds the end-to-end tests of the control plane's own controllers during a
// skewed upgrade: the real kube-controller-manager, built from the same Kubernetes module as the
// oldest apiserver, against its local apiserver and through a front. The front is the test data
// plane standing in for Envoy unless ENVOY_BIN is set.
package controllers
