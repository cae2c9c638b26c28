#!/bin/bash
# Build the pinned Kubernetes servers from the Go module proxy into a tools
# directory: kube-apiserver and etcd (the job controller's tests), and kubelet,
# kube-controller-manager and kube-scheduler (the single-node test cluster,
# mk/cluster.mk).
#
#   scripts/build-k8s-tools.sh OUTDIR TOOL ...
#   TOOL: kube-apiserver|kubelet|kube-controller-manager|kube-scheduler|etcd
#
# Versions are pinned in tools/k8s/<module>/go.mod. The four Kubernetes
# binaries come from one module, tools/k8s/kube-apiserver (k8s.io/kubernetes
# with every k8s.io/* staging module replaced by the matching v0.x.y); etcd
# from tools/k8s/etcd (go.etcd.io/etcd/server/v3). The Kubernetes binaries get
# -X version ldflags so that they report a parseable version (kubectl and
# discovery need one; without them the node reports v0.0.0-master+$Format:%H$).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUTDIR kube-apiserver|kubelet|kube-controller-manager|kube-scheduler|etcd ..." >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
GO=${GO:-go}
export GOFLAGS=-mod=readonly CGO_ENABLED=0

for tool in "$@"; do
  start=$(date +%s)
  case $tool in
  kube-apiserver | kubelet | kube-controller-manager | kube-scheduler)
    dir=$root/tools/k8s/kube-apiserver
    v=$(cd "$dir" && $GO list -m -f '{{.Version}}' k8s.io/kubernetes)
    minor=$(echo "$v" | cut -d. -f2)
    ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
      ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    echo "building $tool $v (minutes on 2 cores, once per machine)"
    (cd "$dir" && $GO build -trimpath -tags=providerless -ldflags "$ld" \
      -o "$out/$tool.tmp" "k8s.io/kubernetes/cmd/$tool")
    ;;
  etcd)
    dir=$root/tools/k8s/etcd
    v=$(cd "$dir" && $GO list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
    echo "building etcd $v (about a minute, once)"
    (cd "$dir" && $GO build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3)
    ;;
  *)
    echo "$0: unknown tool $tool (want kube-apiserver, kubelet, kube-controller-manager, kube-scheduler or etcd)" >&2
    exit 2
    ;;
  esac
  mv "$out/$tool.tmp" "$out/$tool"
  echo "$tool $v -> $out/$tool in $(( $(date +%s) - start ))s"
done
