# The single EpochFS image, epochfs/epochfs, that deploy/ references:
# /usr/local/bin/cachefs, /usr/local/bin/cachefs-job (`cachefs job`), /usr/local/bin/csi-driver
# (node, controller, mounter and registrar modes) and /usr/local/bin/job-controller.
#
# The same recipe as `make images` (mk/images.mk, docs/CLUSTER.md), which builds
# this image without Docker and is what the end-to-end tests run: the root
# filesystem from scripts/image-rootfs.sh (mmdebstrap: Debian bookworm's Essential
# packages + fuse3 + ca-certificates + libcephfs2, no apt, no docs), the binaries built with
# the same flags into /usr/local/bin, the same command and working directory.
#
# NOT RUN WITH DOCKER: the machine this file was written on has no Docker daemon
# and no registry, so `docker build` of this file has never run (`make images`
# has). Expected differences from `make images`: the timestamps of the binaries
# layer, and the package versions if the mirror moved on.
#
#   docker build -t epochfs/epochfs:v0.1.0 --build-arg VERSION=v0.1.0 .
#
# Base images are named without a registry host; pull them through your mirror
# (or retag them) as deploy/README.md describes for the other images.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# cachefs links Ceph 16's libcephfs (go-ceph, -tags ceph,pacific) for cephfs:// sources.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libcephfs-dev librados-dev \
    && rm -rf /var/lib/apt/lists/*
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ \
        ./cmd/cachefs-job ./cmd/csi-driver ./cmd/job-controller \
    && CGO_ENABLED=1 go build -trimpath -tags ceph,pacific -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/cachefs

# The root filesystem, made by the script `make images` runs, from this stage's
# own apt sources. mmdebstrap runs in root mode without mounts (chroot and
# mknod only: Docker's default capabilities).
FROM debian:bookworm AS rootfs
RUN apt-get update \
    && apt-get install -y --no-install-recommends mmdebstrap \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/image-rootfs.sh /image-rootfs.sh
RUN bash /image-rootfs.sh /rootfs.tar /etc/apt/sources.list.d/debian.sources \
    && mkdir /rootfs && tar -xpf /rootfs.tar --numeric-owner -C /rootfs

FROM scratch
COPY --from=rootfs /rootfs/ /
COPY --from=build /out/cachefs /out/cachefs-job /out/csi-driver /out/job-controller /usr/local/bin/
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /
ARG VERSION=dev
LABEL org.opencontainers.image.title=epochfs org.opencontainers.image.version=${VERSION}
# The manifests set each container's command (csi-driver as root; job-controller as uid 65532).
CMD ["/usr/local/bin/cachefs", "--help"]
