#!/usr/bin/env bash
# deploy-check: render every deployment manifest of EpochFS and check it, offline.
#
#   make deploy-check            # installs the pinned helm into .tools/bin first
#   HELM=/path/to/helm scripts/deploy-check.sh
#
# Renders deploy/kustomize/{base,examples,overlays/production} with
# `kubectl kustomize` and deploy/helm/epochfs with `helm template` (default values,
# deploy/check/values-test.yaml, and --set mounter.enabled=false), runs
# `helm lint --strict` on each value set, checks that the chart refuses unpinned
# images, then runs deploy/check/check.py over the renderings: every document
# parses as a Kubernetes object; helm (default values) renders exactly the
# kustomize base objects, field for field (bar the Namespace), and with
# mounter.enabled=false the same minus the mounter container; the CSIDriver,
# DaemonSet (incl. the mounter container), controller, RBAC, metrics Service and
# examples have the properties the driver relies on; every image is pinned and
# names no registry host.
#
# Nothing here talks to a cluster. The server-side dry run (`kubectl apply
# --dry-run=server`) of every rendering against a real kube-apiserver is a Go
# test: TestDeployDryRunEverything in pkg/job/controller (make test).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "deploy-check: $*" >&2; exit 1; }

HELM="${HELM:-${EPOCHFS_TOOLS_BIN:-$PWD/.tools/bin}/helm}"
[ -x "$HELM" ] || die "helm not found at $HELM: run 'make deploy-check' (installs the pinned helm into .tools/bin) or set HELM"
command -v kubectl >/dev/null || die "kubectl is required (for 'kubectl kustomize')"
# A python3 with PyYAML: the one on the PATH, else Debian's (python3-yaml).
PY=python3
if ! command -v python3 >/dev/null || ! python3 -c 'import yaml' 2>/dev/null; then
  PY=/usr/bin/python3
  "$PY" -c 'import yaml' 2>/dev/null || die "python3 with PyYAML is required (apt-get install python3 python3-yaml)"
fi

chart=deploy/helm/epochfs
values_test=deploy/check/values-test.yaml
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

step() { echo "deploy-check: $*"; }
run() { # run CMD... > file, showing the command's stderr on failure
  local dst="$1"; shift
  if ! "$@" >"$out/$dst" 2>"$out/stderr"; then
    cat "$out/stderr" >&2
    die "failed: $*"
  fi
}

step "kubectl kustomize deploy/kustomize/{base,examples,overlays/production}"
run kustomize-base.yaml kubectl kustomize deploy/kustomize/base
run kustomize-examples.yaml kubectl kustomize deploy/kustomize/examples
run kustomize-production.yaml kubectl kustomize deploy/kustomize/overlays/production

step "helm lint --strict ($("$HELM" version --template '{{.Version}}'))"
run lint-default.txt "$HELM" lint --strict "$chart"
run lint-test.txt "$HELM" lint --strict -f "$values_test" "$chart"
run lint-nomounter.txt "$HELM" lint --strict --set mounter.enabled=false "$chart"

step "helm template (default values, $values_test, mounter.enabled=false)"
run helm-default.yaml "$HELM" template epochfs "$chart" --namespace epochfs-system
run helm-test.yaml "$HELM" template epochfs "$chart" --namespace epochfs-system -f "$values_test"
run helm-nomounter.yaml "$HELM" template epochfs "$chart" --namespace epochfs-system --set mounter.enabled=false

step "helm template refuses unpinned images and a StorageClass without a source"
refuse() { # refuse WHAT --set ...: helm template must fail
  local what="$1"; shift
  if "$HELM" template epochfs "$chart" --namespace epochfs-system "$@" >/dev/null 2>"$out/stderr"; then
    die "the chart rendered $what ($*); it must refuse"
  fi
}
refuse "a 'latest' driver image" --set image.tag=latest
refuse "an untagged driver image" --set image.tag=
refuse "an untagged provisioner image" --set sidecars.provisioner.tag=
refuse "a StorageClass without parameters.source" --set storageClass.create=true

step "checking the renderings (deploy/check/check.py)"
"$PY" deploy/check/check.py "$out" "$values_test" "$PWD"
