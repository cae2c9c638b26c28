#!/usr/bin/env bash
# deploy-check: render every deployment manifest of EpochFS and check it, offline.
#
#   make deploy-check            # installs the pinned helm into .tools/bin first
#   HELM=/path/to/helm scripts/deploy-check.sh
#
# Renders deploy/kustomize/{base,examples,overlays/production,base/job-controller} with
# `kubectl kustomize`, runs `helm lint --strict` (which also validates the
# values against values.schema.json) with the default and the test values, then
# runs deploy/check/check.py, which renders the chart with each of its value
# sets (defaults, deploy/check/values-test.yaml, mounter off, dynamic
# provisioning, upstream sidecars, one mirror, PodMonitor) and checks what the
# real install (the e2e of make test) cannot prove: the
# chart's defaults render exactly the kustomize base (bar the Namespace), with
# controller.enabled=true the production overlay, and with
# jobController.enabled=true also the job controller's kustomize objects; the values the e2e
# does not set reach the objects they are for; the security properties (privileged only csi-driver and
# mounter, the exact hostPath list per container, read-only local roots, RBAC
# least privilege, no Secrets); pinned images from known registries only; and
# that the chart refuses bad values (schema and template checks) with a
# message naming the problem.
#
# Nothing here talks to a cluster. The server-side dry run (`kubectl apply
# --dry-run=server`, strict field validation) of the renderings against a real
# kube-apiserver is a Go test: TestDeployDryRunEverything in
# pkg/job/controller (make test).
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

step "kubectl kustomize deploy/kustomize/{base,examples,overlays/production,base/job-controller}"
run kustomize-base.yaml kubectl kustomize deploy/kustomize/base
run kustomize-examples.yaml kubectl kustomize deploy/kustomize/examples
run kustomize-production.yaml kubectl kustomize deploy/kustomize/overlays/production
run kustomize-job-controller.yaml kubectl kustomize deploy/kustomize/base/job-controller

step "helm lint --strict ($("$HELM" version --template '{{.Version}}'))"
run lint-default.txt "$HELM" lint --strict "$chart"
run lint-test.txt "$HELM" lint --strict -f "$values_test" "$chart"

step "checking the chart's renderings, refusals and the kustomize trees (deploy/check/check.py)"
HELM="$HELM" "$PY" deploy/check/check.py "$out" "$values_test" "$PWD"
