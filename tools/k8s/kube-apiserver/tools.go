//go:build tools

// Package tools pins the Kubernetes servers for the tests: kube-apiserver
// (the job controller's tests) and kubelet, kube-controller-manager and
// kube-scheduler (the single-node test cluster, internal/testenv/cluster).
// It requires k8s.io/kubernetes and replaces every k8s.io/* staging module
// with the matching v0.x.y (see go.mod). Built by scripts/build-k8s-tools.sh.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
