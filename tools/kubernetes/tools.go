//go:build tools

// Package tools pins the Kubernetes control plane the tests run: kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl,
// built from the k8s.io/kubernetes module at the version in go.mod (its staging modules replaced by the
// same-numbered v0.x releases, as the module itself replaces them with ./staging). tools/build builds them.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
