# Kubernetes tools for the job controller (included by the main Makefile).
#
# kube-apiserver and etcd are built once from the Go module proxy into
# .tools/bin (versions pinned in tools/k8s/*/go.mod) and reused; the tests in
# pkg/job and cmd/cachefs start them on 127.0.0.1 (internal/testenv/kube.go).
# controller-gen generates the TrainingJob deepcopy code and CRD.

CONTROLLER_GEN_VERSION := v0.23.0

tools: $(TOOLS_BIN)/kube-apiserver $(TOOLS_BIN)/etcd

$(TOOLS_BIN)/kube-apiserver: tools/k8s/kube-apiserver/go.mod tools/k8s/kube-apiserver/go.sum scripts/build-k8s-tools.sh
	@mkdir -p $(TOOLS_BIN)
	GO=$(GO) bash scripts/build-k8s-tools.sh $(TOOLS_BIN) kube-apiserver

$(TOOLS_BIN)/etcd: tools/k8s/etcd/go.mod tools/k8s/etcd/go.sum scripts/build-k8s-tools.sh
	@mkdir -p $(TOOLS_BIN)
	GO=$(GO) bash scripts/build-k8s-tools.sh $(TOOLS_BIN) etcd

$(TOOLS_BIN)/controller-gen:
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: k8s-tools generate-job-api

## k8s-tools: only the Kubernetes test servers (kube-apiserver, etcd) and controller-gen.
k8s-tools: $(TOOLS_BIN)/kube-apiserver $(TOOLS_BIN)/etcd $(TOOLS_BIN)/controller-gen

## generate-job-api: TrainingJob deepcopy code and CRD (deploy/crds/) from pkg/job/api/v1alpha1.
generate-job-api: $(TOOLS_BIN)/controller-gen
	$(TOOLS_BIN)/controller-gen object paths=./pkg/job/api/...
	$(TOOLS_BIN)/controller-gen crd paths=./pkg/job/api/... output:crd:artifacts:config=deploy/crds
