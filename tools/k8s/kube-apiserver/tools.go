//go:build tools

// Package tools pins kube-apiserver for the job controller's tests: it
// requires k8s.io/kubernetes and replaces every k8s.io/* staging module with
// the matching v0.x.y (see go.mod). Built by scripts/build-k8s-tools.sh.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
