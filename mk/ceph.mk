# CephFS (cgo, libcephfs through go-ceph) and the throw-away Ceph cluster of
# the CephFS and RGW tests (included by the main Makefile; issue 14).
#
# `make build` stays cgo-free: pkg/backend/cephfs/cephfs.go is behind the `ceph`
# build tag (cephfs_stub.go, without it, says which build has it). go-ceph
# v0.34.0 is built against Debian 12's Ceph 16 with its `pacific` tag.

CEPH_TAGS := ceph,pacific
# Packages with ceph-tagged tests; `make test` runs only their CephFS tests
# (-run CephFS) again with the tags, the rest ran already in the cgo-free run.
CEPH_TEST_PKGS := ./pkg/backend/cephfs ./cmd/cachefs
# ...and what lint checks with the tags as well.
CEPH_LINT_PKGS := ./pkg/backend/... ./cmd/cachefs ./bench/ceph
CEPH_DIR ?= $(CURDIR)/.ceph

.PHONY: ceph-deps build-ceph test-ceph ceph-up ceph-down bench-ceph

## ceph-deps: the Debian packages of the CephFS build and the Ceph tests (libcephfs-dev, librados-dev, ceph-mon,
## ceph-mgr, ceph-osd, ceph-mds, radosgw, ceph-common, python3-cephfs), apt-get only when missing.
ceph-deps:
	bash scripts/ceph-deps.sh

## build-ceph: bin/cachefs with the cephfs:// backend (cgo, -tags ceph,pacific; needs libcephfs-dev).
build-ceph: ceph-deps
	CGO_ENABLED=1 $(GO) build -tags $(CEPH_TAGS) -ldflags "$(LDFLAGS)" -o bin/cachefs ./cmd/cachefs

## test-ceph: the CephFS tests (-tags ceph,pacific, -race) on one throw-away Ceph cluster (scripts/with-ceph.sh).
test-ceph: ceph-deps
	CGO_ENABLED=1 bash scripts/with-ceph.sh $(GO) test -race -count=1 -timeout 20m -tags $(CEPH_TAGS) -run CephFS $(CEPH_TEST_PKGS)

## ceph-up: start a Ceph cluster with RGW in CEPH_DIR (.ceph) and leave it running; tests reuse it with
## EPOCHFS_CEPH_DIR=$(CEPH_DIR). ceph-down stops it.
ceph-up: ceph-deps
	CEPH_DIR=$(CEPH_DIR) WITH_RGW=1 bash scripts/ceph-server.sh start
	@echo "export EPOCHFS_CEPH_DIR=$(CEPH_DIR) CEPH_CONF=$(CEPH_DIR)/ceph.conf"

ceph-down:
	CEPH_DIR=$(CEPH_DIR) bash scripts/ceph-server.sh stop

## bench-ceph: cold epoch through a cachefs mount vs the direct read, same concurrency: CephFS via go-ceph, and
## Ceph RGW and MinIO via a GET loop (bench/ceph; on one throw-away cluster; needs root). Into bench/RESULTS.md by hand.
bench-ceph: build-ceph $(TOOLS_BIN)/minio
	CGO_ENABLED=1 $(GO) build -tags $(CEPH_TAGS) -o bin/bench-ceph ./bench/ceph
	bash scripts/with-ceph.sh bin/bench-ceph -cachefs bin/cachefs -minio $(TOOLS_BIN)/minio $(BENCH_ARGS)
