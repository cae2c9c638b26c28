# Pinned tools (included by the main Makefile).
#
# Every tool is built once per machine into a cache outside the checkout,
# keyed by its version (or, for the Kubernetes servers, by a hash of their
# pinning go.mod/go.sum and build script), so a fresh clone on the same machine
# reuses it and a version bump builds the new one beside the old:
#
#   $(TOOLS_CACHE)/<tool>-<key>/<tool>        the binary
#   .tools/bin/<tool> -> that binary           what tests and scripts use
#
# TOOLS_CACHE defaults to $XDG_CACHE_HOME/epochfs-tools (~/.cache/epochfs-tools);
# set it to share or relocate the cache. `make tools-clean` drops the links in
# .tools/bin, never the cache.

RCLONE_VERSION         := v1.76.0
CONTROLLER_GEN_VERSION := v0.23.0

TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/epochfs-tools

# go_tool NAME KEY PACKAGE@VERSION [INSTALL FLAGS]: go install into the cache,
# link into $(TOOLS_BIN). The link is remade when the cached binary is newer
# (make follows the link for its time), i.e. after a version change.
define go_tool
$(TOOLS_CACHE)/$(1)-$(2)/$(1):
	@mkdir -p $$(@D)
	@echo "installing $(1) $(2) into $$(@D) (once per machine)"
	GOBIN=$$(@D) $$(GO) install $(4) $(3)
$(TOOLS_BIN)/$(1): $(TOOLS_CACHE)/$(1)-$(2)/$(1)
	@mkdir -p $$(@D)
	ln -sfn $$< $$@
endef

$(eval $(call go_tool,minio,$(MINIO_VERSION),github.com/minio/minio@$(MINIO_VERSION)))
$(eval $(call go_tool,staticcheck,$(STATICCHECK_VERSION),honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)))
$(eval $(call go_tool,helm,$(HELM_VERSION)-k8s1.$(HELM_K8S_MINOR),helm.sh/helm/v3/cmd/helm@$(HELM_VERSION),-ldflags "$(HELM_LDFLAGS)"))
$(eval $(call go_tool,csi-sanity,$(CSI_SANITY_VERSION),github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$(CSI_SANITY_VERSION)))
$(eval $(call go_tool,controller-gen,$(CONTROLLER_GEN_VERSION),sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)))
$(eval $(call go_tool,rclone,$(RCLONE_VERSION),github.com/rclone/rclone@$(RCLONE_VERSION)))

# k8s_tool NAME [MODULE]: built by scripts/build-k8s-tools.sh from the tools
# module tools/k8s/MODULE (default NAME); keyed by what pins it.
k8s_tool_key = $(shell cat tools/k8s/$(1)/go.mod tools/k8s/$(1)/go.sum scripts/build-k8s-tools.sh | sha256sum | cut -c1-16)
define k8s_tool
$(TOOLS_CACHE)/$(1)-$(call k8s_tool_key,$(or $(2),$(1)))/$(1):
	GO=$$(GO) bash scripts/build-k8s-tools.sh $$(@D) $(1)
$(TOOLS_BIN)/$(1): $(TOOLS_CACHE)/$(1)-$(call k8s_tool_key,$(or $(2),$(1)))/$(1)
	@mkdir -p $$(@D)
	ln -sfn $$< $$@
endef

$(eval $(call k8s_tool,kube-apiserver))
$(eval $(call k8s_tool,etcd))
# The node side of the test cluster (mk/cluster.mk `cluster-tools`, not in
# `tools`): same module, version and -X ldflags as kube-apiserver.
$(eval $(call k8s_tool,kubelet,kube-apiserver))
$(eval $(call k8s_tool,kube-controller-manager,kube-apiserver))
$(eval $(call k8s_tool,kube-scheduler,kube-apiserver))

# pause: the test cluster's pod sandbox process, static C (gcc), keyed by its
# source (order-only: a fresh clone's pause.c is newer than the cached binary,
# which must not make every clone rebuild it).
PAUSE_KEY := $(shell cat tools/pause/pause.c | sha256sum | cut -c1-16)
$(TOOLS_CACHE)/pause-$(PAUSE_KEY)/pause: | tools/pause/pause.c
	@mkdir -p $(@D)
	gcc -static -O2 -s -o $@.tmp tools/pause/pause.c && mv $@.tmp $@
$(TOOLS_BIN)/pause: $(TOOLS_CACHE)/pause-$(PAUSE_KEY)/pause
	@mkdir -p $(@D)
	ln -sfn $< $@

.PHONY: tools-clean tools-where
## tools-where: the tool cache directory and what .tools/bin links to.
tools-where:
	@echo "tool cache: $(TOOLS_CACHE)"; ls -l $(TOOLS_BIN) 2>/dev/null | sed -n 's/.* \([^ ]* -> .*\)/  \1/p'
tools-clean:
	rm -rf $(TOOLS_BIN)
