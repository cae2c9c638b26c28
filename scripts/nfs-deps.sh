#!/bin/bash
# Debian packages the NFS tests need (the nfs:// backend's conformance run and
# mount test against a real NFS-Ganesha): nfs-ganesha with its VFS FSAL,
# rpcbind (NFSv3's portmapper, which Ganesha registers with), and iproute2 +
# util-linux for the private network namespace the tests run them in
# (scripts/nfs-server.sh). Installed with apt-get only when missing, so a
# second run costs one dpkg-query per package.
#
#   scripts/nfs-deps.sh          install what is missing (needs root)
#   scripts/nfs-deps.sh --check  exit 1 listing what is missing
#
# No service is started by the install that the tests rely on: the tests run
# rpcbind and ganesha.nfsd as their own processes in their own namespace.
set -euo pipefail
pkgs=(nfs-ganesha nfs-ganesha-vfs rpcbind iproute2 util-linux)
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
  echo "missing Debian packages: ${missing[*]} (run scripts/nfs-deps.sh)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: need root to install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" || {
  apt-get -o DPkg::Lock::Timeout=600 update && apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
}
