# Container images, built without a Docker daemon or a registry (included by
# the main Makefile; docs/CLUSTER.md "Images"). Into bin/images/:
#
#   epochfs.tar       epochfs/epochfs:$(IMAGE_TAG): cachefs (with cephfs://), cachefs-job,
#                     csi-driver, job-controller in /usr/local/bin on Debian bookworm
#                     (Essential packages + fuse3 + ca-certificates + libcephfs2,
#                     scripts/image-rootfs.sh)
#   test-reader.tar   epochfs/test-reader:$(IMAGE_TAG): Debian's static busybox and
#                     read-dataset (reads a dataset twice, prints sha256s)
#   torch-example.tar epochfs/torch-example:$(IMAGE_TAG): Debian bookworm with
#                     python3-torch, python3-torchvision, python3-pil (torchrun in
#                     /usr/bin) and examples/pytorch/ in /opt/epochfs/examples/pytorch
#                     (docs/PYTORCH.md)
#
# Docker-archive tars: `ctr -n k8s.io images import FILE` (or `docker load`).
# The Debian root filesystem is made once per machine (mmdebstrap, root, apt)
# into the tool cache, keyed by a hash of its recipe; a second `make images`
# only rebuilds the binaries and their layer.

# The tool cache, as mk/tools.mk sets it (that file is read after this one,
# and rule targets are expanded when read).
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/epochfs-tools

IMAGE_TAG    ?= $(VERSION)
IMAGES_DIR   := bin/images
IMAGE_LDFLAGS := -s -w -X main.version=$(VERSION)
ROOTFS_KEY   := $(shell cat scripts/image-rootfs.sh | sha256sum | cut -c1-16)
ROOTFS_TAR   := $(TOOLS_CACHE)/image-rootfs-$(ROOTFS_KEY)/rootfs.tar
# The torch-example base: the same script with IMAGE_PACKAGES, keyed by both.
TORCH_PACKAGES    := python3-torch,python3-torchvision,python3-pil
TORCH_ROOTFS_KEY  := $(shell { cat scripts/image-rootfs.sh; echo $(TORCH_PACKAGES); } | sha256sum | cut -c1-16)
TORCH_ROOTFS_TAR  := $(TOOLS_CACHE)/image-rootfs-torch-$(TORCH_ROOTFS_KEY)/rootfs.tar

.PHONY: images image-deps

## images: the epochfs/epochfs, epochfs/test-reader and epochfs/torch-example images as importable Docker-archive tars in bin/images/ (needs root, mmdebstrap).
# cachefs is built with cgo and -tags ceph,pacific against this machine's Debian 12 libcephfs-dev (ceph-deps),
# the same Ceph 16 as the image's libcephfs2, so the image serves cephfs:// sources; the others stay static.
images: $(ROOTFS_TAR) $(TORCH_ROOTFS_TAR) image-deps ceph-deps
	@mkdir -p $(IMAGES_DIR)/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o $(IMAGES_DIR)/bin/ \
		$(addprefix ./cmd/,$(filter-out cachefs,$(BINARIES)))
	CGO_ENABLED=1 $(GO) build -trimpath -tags $(CEPH_TAGS) -ldflags "$(IMAGE_LDFLAGS)" -o $(IMAGES_DIR)/bin/ ./cmd/cachefs
	$(GO) run ./internal/cmd/mkimage epochfs -rootfs $(ROOTFS_TAR) -bin-dir $(IMAGES_DIR)/bin \
		-ref epochfs/epochfs:$(IMAGE_TAG) -out $(IMAGES_DIR)/epochfs.tar
	$(GO) run ./internal/cmd/mkimage test-reader -busybox /bin/busybox \
		-ref epochfs/test-reader:$(IMAGE_TAG) -out $(IMAGES_DIR)/test-reader.tar
	$(GO) run ./internal/cmd/mkimage torch-example -rootfs $(TORCH_ROOTFS_TAR) -examples examples/pytorch \
		-ref epochfs/torch-example:$(IMAGE_TAG) -out $(IMAGES_DIR)/torch-example.tar

# image-deps: Debian's mmdebstrap and busybox-static, apt-get only when missing.
image-deps:
	@for p in mmdebstrap busybox-static; do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
	fi

$(ROOTFS_TAR): | image-deps
	@mkdir -p $(@D)
	@echo "making the image's Debian root filesystem into $(@D) (once per machine)"
	bash scripts/image-rootfs.sh $@

$(TORCH_ROOTFS_TAR): | image-deps
	@mkdir -p $(@D)
	@echo "making the torch-example image's Debian root filesystem into $(@D) (once per machine)"
	IMAGE_PACKAGES=$(TORCH_PACKAGES) bash scripts/image-rootfs.sh $@

# image-push: the epochfs/epochfs and epochfs/torch-example images of bin/images (`make images`)
# to $(REGISTRY) at the chart's appVersion, which the chart pulls by default
# (`helm install ... --set image.registry=$(REGISTRY)`). crane in-process (mkimage push);
# credentials from the docker config (`docker login` / ~/.docker/config.json), never printed.
# HTTPS unless the registry is on localhost/127.0.0.1, or INSECURE=1 (plain HTTP, the admin's call).
CHART_APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' deploy/helm/epochfs/Chart.yaml)
PUSH_IMAGES ?= epochfs torch-example

.PHONY: image-push
## image-push: push epochfs/epochfs and epochfs/torch-example (bin/images) to REGISTRY=host[:port][/path] at the chart's appVersion (INSECURE=1: plain HTTP).
image-push:
	@test -n "$(REGISTRY)" || { echo "usage: make image-push REGISTRY=host[:port][/path] [INSECURE=1]" >&2; exit 2; }
	@for i in $(PUSH_IMAGES); do test -f $(IMAGES_DIR)/$$i.tar || { echo "$(IMAGES_DIR)/$$i.tar missing: run \`make images\`" >&2; exit 1; }; done
	$(GO) run ./internal/cmd/mkimage push -registry $(REGISTRY) -tag $(CHART_APP_VERSION) \
		$(if $(filter 1 true,$(INSECURE)),-insecure) $(addprefix $(IMAGES_DIR)/,$(addsuffix .tar,$(PUSH_IMAGES)))
