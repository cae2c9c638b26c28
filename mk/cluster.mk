# A real single-node Kubernetes on 127.0.0.1 for end-to-end tests (included by
# the main Makefile; docs/CLUSTER.md). etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd (Debian's, CRI plugin)
# and kubelet, all under CLUSTER_DIR; never a system containerd.

CLUSTER_DIR ?= $(CURDIR)/.cluster
CLUSTER_TOOLS := $(TOOLS_BIN)/kube-apiserver $(TOOLS_BIN)/etcd $(TOOLS_BIN)/kubelet \
	$(TOOLS_BIN)/kube-controller-manager $(TOOLS_BIN)/kube-scheduler $(TOOLS_BIN)/pause

.PHONY: cluster-deps cluster-tools cluster-up cluster-down cluster-status e2e

## cluster-deps: the Debian packages of the test cluster (containerd, runc, CNI plugins, busybox-static, gcc), apt-get only when missing.
cluster-deps:
	bash scripts/cluster-deps.sh

## cluster-tools: Debian packages plus kubelet, kube-controller-manager, kube-scheduler, kube-apiserver, etcd, pause (built once per machine).
cluster-tools: cluster-deps $(CLUSTER_TOOLS)

## cluster-up: start the single-node test cluster under .cluster/, import the images and install the chart as the
## e2e does (docs/CLUSTER.md); leaves it running and prints the kubeconfig path.
cluster-up: cluster-tools images $(TOOLS_BIN)/helm
	$(GO) run ./internal/cmd/cluster up -dir $(CLUSTER_DIR) -images $(IMAGES_DIR) -chart deploy/helm/epochfs

## cluster-down: stop every pod and process of the test cluster and unmount what it and the chart mounted (idempotent).
cluster-down:
	$(GO) run ./internal/cmd/cluster down -dir $(CLUSTER_DIR)

## cluster-status: which test cluster processes run, and the node's state.
cluster-status:
	$(GO) run ./internal/cmd/cluster status -dir $(CLUSTER_DIR)

## e2e: only the end-to-end tests (`make test` runs them too), on fresh test clusters with the images (needs root).
e2e: cluster-tools images
	EPOCHFS_E2E=1 $(GO) test -count=1 -v -timeout 20m -run 'TestCluster' ./internal/testenv/cluster/
	EPOCHFS_E2E=1 $(GO) test -count=1 -v -timeout 20m ./e2e/
