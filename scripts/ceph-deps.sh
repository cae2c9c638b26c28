#!/bin/bash
# Debian packages the CephFS backend build (cgo, -tags ceph,pacific) and the
# Ceph tests need, installed with apt-get only when missing: libcephfs-dev and
# librados-dev (headers and libraries go-ceph links against) and the daemons of
# the throw-away test cluster started by scripts/ceph-server.sh (ceph-mon,
# ceph-mgr, ceph-osd, ceph-mds, radosgw, ceph-common for the ceph and
# radosgw-admin commands, python3-cephfs to populate CephFS without a kernel
# mount), plus uuid-runtime (uuidgen) and gcc for cgo.
#
#   scripts/ceph-deps.sh          install what is missing (needs root)
#   scripts/ceph-deps.sh --check  exit 1 listing what is missing
set -euo pipefail
pkgs=(libcephfs-dev librados-dev ceph-mon ceph-mgr ceph-osd ceph-mds radosgw ceph-common
  python3-cephfs uuid-runtime gcc libc6-dev)
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
  echo "missing Debian packages: ${missing[*]} (run scripts/ceph-deps.sh)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: need root to install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends: nothing extra. The packages' systemd units are never
# started here (no systemd in the test machines); the test cluster runs its own
# daemons from scripts/ceph-server.sh with its own config and data dir.
apt-get install -y --no-install-recommends "${missing[@]}" || {
  apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"
}
