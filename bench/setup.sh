#!/usr/bin/env bash
# Host prerequisites of the throughput benchmark (run by `make bench-throughput`,
# never by `make test`): Debian's fuse3, which `rclone mount` needs
# (fusermount3). Needs root for apt-get; does nothing when fuse3 is there.
set -euo pipefail
if command -v fusermount3 >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "bench/setup.sh: fuse3 is missing; as root: apt-get install -y fuse3" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq fuse3
