#!/bin/bash
# Debian packages the test cluster (make cluster-up, make e2e) needs, installed
# with apt-get only when missing: containerd (with its CRI plugin), runc, the
# CNI plugins (bridge, host-local, loopback in /usr/lib/cni), busybox-static
# (the test image's /bin/sh), gcc (static pause binary) and iproute2 (`ip`,
# which removes the CNI bridge at teardown).
#
#   scripts/cluster-deps.sh          install what is missing (needs root)
#   scripts/cluster-deps.sh --check  exit 1 listing what is missing
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2)
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = --check ]; then
  echo "missing Debian packages: ${missing[*]} (run scripts/cluster-deps.sh)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: need root to install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends: nothing extra. The test cluster runs its own
# containerd (own config, socket and state dirs) and never uses a system one.
apt-get install -y --no-install-recommends "${missing[@]}" || {
  apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"
}
