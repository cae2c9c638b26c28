# EpochFS — build, test, demo, tools, lint.
#
# Tools (pinned versions) are built once per machine into a cache outside the
# checkout and linked into .tools/bin (mk/tools.mk); `make test` installs them
# when missing.

SHELL       := /bin/bash
GO          ?= go
TOOLS_BIN   := $(CURDIR)/.tools/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)

MINIO_VERSION       := v0.0.0-20260212201848-7aac2a2c5b7c
STATICCHECK_VERSION := v0.8.2
HELM_VERSION        := v3.22.0
# Kubernetes version helm v3.22.0 is built against (k8s.io/client-go v0.37.0 in its
# go.mod); set like helm's own release build, else `helm template` assumes v1.20.
HELM_K8S_MINOR      := 37
CSI_SANITY_VERSION  := v5.6.0

export PATH := $(TOOLS_BIN):$(PATH)
export EPOCHFS_TOOLS_BIN := $(TOOLS_BIN)
export GOFLAGS := -buildvcs=false

.PHONY: all help build test test-fast test-short demo tools lint vet bench clean

all: build

## help: this list (the `## target: text` lines of Makefile and mk/*.mk).
help:
	@awk '/^## [^ :]+:/ { t = $$2; sub(/:$$/, "", t); sub(/^## [^ :]+: */, ""); printf "  %-22s %s\n", t, $$0; next } \
	     /^##  *[^ ]/ { sub(/^## */, ""); printf "  %-22s %s\n", "", $$0 }' Makefile $(sort $(wildcard mk/*.mk))

# BINARIES: every binary `make build` writes to bin/, one line each (bin/NAME from ./cmd/NAME).
BINARIES := \
	cachefs \
	cachefs-job \
	csi-driver \
	job-controller

## build: every binary in BINARIES, into bin/.
build: $(addprefix bin/,$(BINARIES))

# Always rebuilt (go build is incremental); the version is stamped with -ldflags.
.PHONY: $(addprefix bin/,$(BINARIES))
$(addprefix bin/,$(BINARIES)): bin/%:
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./cmd/$*

## test: every test, with -race, against real servers (MinIO, kube-apiserver) and real FUSE mounts, and the
## end-to-end tests on the real single-node cluster with the project's images (needs root; builds the tools,
## the cluster tools and the images first, once per machine). What CI runs.
## The Ceph tests (CephFS, RGW) share one throw-away cluster (scripts/with-ceph.sh); the CephFS ones run
## in a second, cgo run with -tags ceph,pacific (mk/ceph.mk).
test: tools cluster-tools images nfs-deps ceph-deps torch-deps
	EPOCHFS_E2E=1 bash scripts/with-ceph.sh bash -c '$(GO) test -race -count=1 -timeout 45m ./... && \
		CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m -tags $(CEPH_TAGS) -run CephFS $(CEPH_TEST_PKGS)'

## test-fast: `make test` without the end-to-end tests (no cluster, no images); they run anyway under CI=true.
test-fast: tools nfs-deps ceph-deps torch-deps
	bash scripts/with-ceph.sh bash -c '$(GO) test -race -count=1 -timeout 30m ./... && \
		CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m -tags $(CEPH_TAGS) -run CephFS $(CEPH_TEST_PKGS)'

## test-short: unit tests only, no servers, no mounts.
test-short:
	$(GO) test -race -count=1 -short ./...

## demo: mount a generated dataset through a half-size NR cache, read 3 shuffled epochs (builds bin/cachefs only).
demo: bin/cachefs
	bin/cachefs demo

## tools: build the pinned test tools once per machine into the tool cache (mk/tools.mk) and link them into .tools/bin.
tools: $(TOOLS_BIN)/minio $(TOOLS_BIN)/staticcheck $(TOOLS_BIN)/helm $(TOOLS_BIN)/csi-sanity



vet:
	$(GO) vet ./...

## lint: go vet, gofmt and staticcheck of the default (cgo-free) build; also of the ceph-tagged files when
## libcephfs-dev is installed (scripts/ceph-deps.sh), else it says it skipped them. Then the tests of the
## tree's shape (internal/archtest): the size rule, DESIGN.md's layout block, what each binary links.
lint: vet $(TOOLS_BIN)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(TOOLS_BIN)/staticcheck ./...
	@if bash scripts/ceph-deps.sh --check 2>/dev/null; then \
		echo "CGO_ENABLED=1 go vet + staticcheck -tags $(CEPH_TAGS) $(CEPH_LINT_PKGS)"; \
		CGO_ENABLED=1 $(GO) vet -tags $(CEPH_TAGS) $(CEPH_LINT_PKGS) && \
		CGO_ENABLED=1 $(TOOLS_BIN)/staticcheck -tags $(CEPH_TAGS) $(CEPH_LINT_PKGS); \
	else echo "lint: ceph-tagged files not checked (libcephfs-dev missing: scripts/ceph-deps.sh)"; fi
	$(GO) test -count=1 ./internal/archtest

## bench: Go benchmarks (results go in bench/RESULTS.md by hand, with the machine and command).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

clean:
	rm -rf bin

HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)



.PHONY: csi-sanity
## csi-sanity: the independently built csi-sanity binary against bin/csi-driver --mode all (needs root).
csi-sanity: build $(TOOLS_BIN)/csi-sanity
	CSI_SANITY=$(TOOLS_BIN)/csi-sanity bash scripts/csi-sanity.sh

.PHONY: deploy-check
## deploy-check: render the kustomize base/examples/overlays and the Helm chart, lint, and check them (offline).
deploy-check: $(TOOLS_BIN)/helm
	HELM=$(TOOLS_BIN)/helm bash scripts/deploy-check.sh

# More targets (and tools: prerequisites) live in mk/*.mk.
-include $(wildcard mk/*.mk)
