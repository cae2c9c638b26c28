# The single EpochFS image, epochfs/epochfs, that deploy/ references:
# /usr/local/bin/cachefs, /usr/local/bin/cachefs-job (`cachefs job`), /usr/local/bin/csi-driver
# and /usr/local/bin/job-controller.
#
# NOT BUILT OR TESTED: the machine this file was written on has no Docker daemon
# and no access to an image registry, so `docker build` has never run on it.
#
#   docker build -t epochfs/epochfs:v0.1.0 --build-arg VERSION=v0.1.0 .
#
# Base images are named without a registry host; pull them through your mirror
# (or retag them) as deploy/README.md describes for the other images.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ \
        ./cmd/cachefs ./cmd/cachefs-job ./cmd/csi-driver ./cmd/job-controller

FROM debian:bookworm-slim
# fuse3: fusermount3 and /etc/fuse.conf for the FUSE mounts; ca-certificates: HTTPS S3 endpoints.
RUN apt-get update \
    && apt-get install -y --no-install-recommends fuse3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/cachefs /out/cachefs-job /out/csi-driver /out/job-controller /usr/local/bin/
# The manifests set each container's command (csi-driver as root; job-controller as uid 65532).
CMD ["/usr/local/bin/cachefs", "--help"]
