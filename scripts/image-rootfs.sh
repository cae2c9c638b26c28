#!/bin/bash
# The base root filesystem of the epochfs/epochfs image, made from Debian
# packages with mmdebstrap: Debian bookworm's Essential:yes packages plus
# fuse3 (fusermount3, /etc/fuse.conf), ca-certificates (HTTPS S3 endpoints)
# and libcephfs2 (with librados2: the Ceph 16 client libraries the image's
# cachefs, built with -tags ceph,pacific, links for cephfs:// sources), with
# their dependencies (no Recommends). No apt, no package lists or caches, no
# docs (copyright files stay), no man pages, no logs, no apt sources.
#
#   scripts/image-rootfs.sh OUT.tar [SOURCES]
#   IMAGE_PACKAGES=python3-torch,python3-torchvision,python3-pil scripts/image-rootfs.sh OUT.tar
#
# IMAGE_PACKAGES, a comma-separated list, replaces the epochfs image's
# packages (the epochfs/torch-example image's base, mk/images.mk); the
# recipe is otherwise the same.
#
# SOURCES is an apt sources file (one-line or deb822) naming a bookworm
# mirror; default: $EPOCHFS_DEBIAN_SOURCES, else this machine's own Debian
# sources (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list).
# Needs root (mmdebstrap's root mode, no mounts: it also runs unprivileged
# in the Dockerfile's build stage). mk/images.mk caches OUT.tar by a hash of
# this file (and IMAGE_PACKAGES), so a change here (packages, hooks) makes a
# new base.
#
# Reproducible for one state of the mirror: SOURCE_DATE_EPOCH (default below)
# fixes every timestamp mmdebstrap and dpkg write.
set -euo pipefail

# PACKAGES: the image's packages beyond Essential:yes.
PACKAGES=${IMAGE_PACKAGES:-fuse3,ca-certificates,libcephfs2}
SUITE=bookworm

out=${1:?usage: $0 OUT.tar [SOURCES]}
sources=${2:-${EPOCHFS_DEBIAN_SOURCES:-}}
if [ -z "$sources" ]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -f "$f" ] && grep -qE "^[^#]*\b$SUITE\b" "$f"; then
      sources=$f
      break
    fi
  done
fi
if [ -z "$sources" ]; then
  echo "$0: no apt sources for $SUITE found; pass a sources file or set EPOCHFS_DEBIAN_SOURCES" >&2
  exit 2
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

# --variant=essential: Essential:yes packages only (no apt, no init).
# --hook-dir merged-usr: /bin, /lib, /sbin as symlinks into /usr and the
#   usr-is-merged marker installed with the Essential packages, else apt
#   satisfies init-system-helpers' "usrmerge | usr-is-merged" with usrmerge
#   and perl (20 MB).
# --skip=chroot/mount: mount nothing into the chroot (works without
#   CAP_SYS_ADMIN, e.g. in a docker build); maintainer scripts do not need /proc.
# path-exclude: dpkg never unpacks docs, man pages, info or translations; the
#   Essential packages are unpacked before that filter applies, so the third
#   hook removes theirs (copyright files stay).
# The customize hooks drop apt's sources (they would name this machine's
#   mirror) and the logs; mmdebstrap's own cleanup then empties apt's lists
#   and caches, and mmtarfilter drops what is left of apt (not installed)
#   and /dev (the runtime makes it).
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT
mmdebstrap --mode=root --variant=essential --include="$PACKAGES" \
  --format=tar --skip=chroot/mount --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook='rm -rf "$1"/etc/apt/sources.list "$1"/etc/apt/sources.list.d/* "$1"/var/log/apt' \
  --customize-hook='rm -f "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log "$1"/var/cache/ldconfig/aux-cache "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
  --customize-hook='find "$1"/usr/share/doc ! -type d ! -name copyright -delete; find "$1"/usr/share/doc -depth -type d -empty -delete; rm -rf "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/* "$1"/usr/share/lintian/*' \
  "$SUITE" - "$sources" |
  mmtarfilter --path-exclude='/etc/apt*' --path-exclude='/var/lib/apt*' --path-exclude='/var/cache/apt*' \
    --path-exclude='/dev/*' > "$tmp"
mv "$tmp" "$out"
trap - EXIT
