# EpochFS — build, test, demo, tools, lint.
#
# Tools are installed once into .tools/bin (pinned versions, from the Go
# module proxy) and reused; `make test` installs them when missing.

SHELL       := /bin/bash
GO          ?= go
TOOLS_BIN   := $(CURDIR)/.tools/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)

MINIO_VERSION       := v0.0.0-20260212201848-7aac2a2c5b7c
STATICCHECK_VERSION := v0.8.2

export PATH := $(TOOLS_BIN):$(PATH)
export EPOCHFS_TOOLS_BIN := $(TOOLS_BIN)
export GOFLAGS := -buildvcs=false

.PHONY: all build test test-short demo tools lint vet bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/cachefs ./cmd/cachefs

## test: every test, with -race, against real servers (MinIO) and real FUSE mounts (needs root).
test: tools
	$(GO) test -race -count=1 -timeout 30m ./...

## test-short: unit tests only, no servers, no mounts.
test-short:
	$(GO) test -race -count=1 -short ./...

## demo: mount a generated dataset through a half-size NR cache, read 3 shuffled epochs.
demo: build
	bin/cachefs demo

tools: $(TOOLS_BIN)/minio $(TOOLS_BIN)/staticcheck

$(TOOLS_BIN)/minio:
	@mkdir -p $(TOOLS_BIN)
	@echo "installing minio $(MINIO_VERSION) (a few minutes, once)"
	GOBIN=$(TOOLS_BIN) $(GO) install github.com/minio/minio@$(MINIO_VERSION)

$(TOOLS_BIN)/staticcheck:
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

vet:
	$(GO) vet ./...

lint: vet $(TOOLS_BIN)/staticcheck
	$(TOOLS_BIN)/staticcheck ./...

## bench: Go benchmarks (results go in bench/RESULTS.md by hand, with the machine and command).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

clean:
	rm -rf bin
