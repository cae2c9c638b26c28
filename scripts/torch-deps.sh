#!/bin/bash
# Debian packages the PyTorch tests and benchmarks need (examples/pytorch:
# train.py's CI test, the DataLoader benchmark): Debian 12's python3-torch
# 1.13 and python3-torchvision 0.14 for /usr/bin/python3, PIL to decode the
# JPEGs, boto3 for the loader that reads S3 directly. Installed with apt-get
# only when missing, so a second run costs one dpkg-query per package.
#
#   scripts/torch-deps.sh          install what is missing (needs root)
#   scripts/torch-deps.sh --check  exit 1 listing what is missing
set -euo pipefail
pkgs=(python3-torch python3-torchvision python3-pil python3-boto3)
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
  echo "missing Debian packages: ${missing[*]} (run scripts/torch-deps.sh)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: need root to install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" || {
  apt-get -o DPkg::Lock::Timeout=900 update && apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}"
}
