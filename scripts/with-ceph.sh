#!/usr/bin/env bash
# Run a command with a throw-away Ceph cluster (scripts/ceph-server.sh: mon,
# mgr, OSD, MDS, CephFS, RGW) that the tests reuse through EPOCHFS_CEPH_DIR
# instead of starting one per test binary, and stop it afterwards, whatever
# the command's outcome. Free 127.0.0.1 ports, a new directory under
# ${TMPDIR:-/tmp}. Used by `make test`; needs root and scripts/ceph-deps.sh.
#
#   scripts/with-ceph.sh go test ./pkg/backend/...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
parent=$(mktemp -d "${TMPDIR:-/tmp}/epochfs-ceph-make.XXXXXX")
export CEPH_DIR="$parent/c"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export MON_V2_PORT=${MON_V2_PORT:-$(free_port)} MON_V1_PORT=${MON_V1_PORT:-$(free_port)} RGW_PORT=${RGW_PORT:-$(free_port)}
cleanup() { GRACE=0 bash "$here/ceph-server.sh" stop >/dev/null 2>&1 || true; rm -rf "$parent"; }
trap cleanup EXIT
WITH_RGW=1 bash "$here/ceph-server.sh" start >"$parent/start.log" 2>&1 || { cat "$parent/start.log" >&2; exit 1; }
echo "with-ceph: cluster in $CEPH_DIR (mon v2 127.0.0.1:$MON_V2_PORT, rgw 127.0.0.1:$RGW_PORT)"
EPOCHFS_CEPH_DIR=$CEPH_DIR "$@"
