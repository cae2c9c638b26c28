//go:build tools

// Package tools pins etcd for the job controller's tests. Built by
// scripts/build-k8s-tools.sh (`go install etcd@version` is refused because
// etcd's go.mod has replace directives).
package tools

import _ "go.etcd.io/etcd/server/v3"
