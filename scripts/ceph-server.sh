#!/usr/bin/env bash
# A throw-away single-node Ceph 16 (Debian packages, scripts/ceph-deps.sh) on
# 127.0.0.1 for the CephFS and RGW tests and benchmarks, without systemd, a
# block device or a kernel mount: 1 mon, 1 mgr, 1 OSD (bluestore on a sparse
# file, or OBJECTSTORE=memstore), 1 MDS, a CephFS named $FS_NAME, and with
# WITH_RGW=1 a RADOS Gateway (S3) on $RGW_PORT with an S3 user whose keys are
# written to $CEPH_DIR/s3.env. Needs root. Adapted from the shared recipe.
#
#   CEPH_DIR=/tmp/x MON_V2_PORT=3300 MON_V1_PORT=6789 RGW_PORT=8000 WITH_RGW=1 scripts/ceph-server.sh start
#   export CEPH_CONF=/tmp/x/ceph.conf     # then ceph -s, libcephfs, go-ceph, cachefs ...
#   CEPH_DIR=/tmp/x scripts/ceph-server.sh stop   # signals only the daemons it started (pid files)
#
# start writes $CEPH_DIR/env (CEPH_CONF, the monitor address, the ports, and
# RGW_ENDPOINT) for tests that reuse a cluster (internal/testenv/ceph, EPOCHFS_CEPH_DIR).
# The keys stay in $CEPH_DIR (keyring, s3.env), mode 0600, never in argv.
set -euo pipefail

cmd=${1:-}
CEPH_DIR=${CEPH_DIR:-/tmp/epochfs-ceph}
OBJECTSTORE=${OBJECTSTORE:-bluestore}     # bluestore | memstore
WITH_RGW=${WITH_RGW:-0}
RGW_PORT=${RGW_PORT:-8000}
MON_V2_PORT=${MON_V2_PORT:-3300}
MON_V1_PORT=${MON_V1_PORT:-6789}
FS_NAME=${FS_NAME:-cephfs}
TIMEOUT=${TIMEOUT:-300}

stop() {
  # Signal only the daemons whose PIDs are recorded in $CEPH_DIR/run/*.pid
  # (and whose /proc/PID/exe is a ceph daemon binary), wait, SIGKILL
  # stragglers, remove the dir (KEEP=1 keeps it). ceph-mds takes ~9 s to exit
  # on SIGTERM; GRACE=0 kills everything at once.
  local GRACE=${GRACE:-15} pids=() f p exe alive
  for f in "$CEPH_DIR"/run/*.pid; do
    [ -s "$f" ] || continue
    p=$(cat "$f")
    exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
    case "$exe" in
      */ceph-mon|*/ceph-mgr|*/ceph-osd|*/ceph-mds|*/radosgw) ;;
      *) continue ;;
    esac
    echo "stopping $(basename "$f" .pid) pid $p"
    if [ "$GRACE" = 0 ]; then kill -KILL "$p"; else kill -TERM "$p"; fi
    pids+=("$p")
  done
  for _ in $(seq 1 $(( (GRACE > 0 ? GRACE : 2) * 10 ))); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  if [ "$GRACE" != 0 ]; then
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && { echo "SIGKILL $p"; kill -KILL "$p"; }; done
  fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$CEPH_DIR"
  echo stopped
}

case "$cmd" in
  start) ;;
  stop) stop; exit 0 ;;
  *) echo "usage: $0 start|stop (CEPH_DIR, MON_V2_PORT, MON_V1_PORT, RGW_PORT, WITH_RGW, OBJECTSTORE, FS_NAME)" >&2; exit 2 ;;
esac
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
# wait_until SECONDS DESCRIPTION CMD... : poll CMD every second, fail the script on timeout
wait_until() {
  local n=$1 what=$2; shift 2
  for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  log "TIMEOUT waiting for $what"; tail -n 20 "$CEPH_DIR"/log/*.log >&2 || true
  GRACE=0 KEEP=1 stop >/dev/null 2>&1 || true; exit 1
}

if [ -e "$CEPH_DIR" ]; then
  echo "$CEPH_DIR exists; run stop-ceph.sh / remove it first" >&2; exit 1
fi
mkdir -p "$CEPH_DIR"/{run,log,mon,mgr,osd,mds,rgw}
# A failed start leaves no daemons behind (the logs stay in $CEPH_DIR).
trap 'GRACE=0 KEEP=1 stop >/dev/null 2>&1 || true' ERR
CEPH_DIR=$(cd "$CEPH_DIR" && pwd)
export CEPH_CONF="$CEPH_DIR/ceph.conf"
FSID=$(uuidgen)

cat > "$CEPH_CONF" <<EOF
[global]
fsid = $FSID
mon initial members = a
mon host = [v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]
public addr = 127.0.0.1
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $CEPH_DIR/keyring
run dir = $CEPH_DIR/run
admin socket = $CEPH_DIR/run/\$name.asok
pid file = $CEPH_DIR/run/\$name.pid
log file = $CEPH_DIR/log/\$name.log
crash dir = $CEPH_DIR/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1

[mon]
mon data = $CEPH_DIR/mon/\$cluster-\$id
mon cluster log file = $CEPH_DIR/log/cluster.log

[mgr]
mgr data = $CEPH_DIR/mgr/\$cluster-\$id
keyring = $CEPH_DIR/mgr/\$cluster-\$id/keyring

[osd]
osd data = $CEPH_DIR/osd/\$cluster-\$id
keyring = $CEPH_DIR/osd/\$cluster-\$id/keyring
osd objectstore = $OBJECTSTORE
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mkfs = false
bluestore fsck on mount = false
memstore device bytes = 2147483648
osd memory target = 939524096
osd crush update on start = true

[mds]
mds data = $CEPH_DIR/mds/\$cluster-\$id
keyring = $CEPH_DIR/mds/\$cluster-\$id/keyring

[client.rgw.a]
rgw data = $CEPH_DIR/rgw/\$cluster-\$id
keyring = $CEPH_DIR/rgw/\$cluster-\$id/keyring
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw dns name = localhost
EOF
mkdir -p "$CEPH_DIR/crash"

# ---- keys + mon -----------------------------------------------------------
log "creating mon"
ceph-authtool --create-keyring "$CEPH_DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool --create-keyring "$CEPH_DIR/keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
ceph-authtool "$CEPH_DIR/mon.keyring" --import-keyring "$CEPH_DIR/keyring" >/dev/null
monmaptool --create --fsid "$FSID" \
  --addv a "[v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]" "$CEPH_DIR/monmap" >/dev/null
ceph-mon --mkfs -i a --monmap "$CEPH_DIR/monmap" --keyring "$CEPH_DIR/mon.keyring"
ceph-mon -i a
wait_until 60 "mon quorum" ceph --connect-timeout 5 mon stat
ceph mon stat
log "mon up"

# ---- mgr ------------------------------------------------------------------
mkdir -p "$CEPH_DIR/mgr/ceph-x"
ceph auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
  -o "$CEPH_DIR/mgr/ceph-x/keyring"
ceph-mgr -i x
log "mgr started"

# ---- osd ------------------------------------------------------------------
OSD_UUID=$(uuidgen)
OSD_SECRET=$(ceph-authtool --gen-print-key)
OSD_ID=$(echo "{\"cephx_secret\": \"$OSD_SECRET\"}" | ceph osd new "$OSD_UUID" -i -)
mkdir -p "$CEPH_DIR/osd/ceph-$OSD_ID"
ceph-authtool --create-keyring "$CEPH_DIR/osd/ceph-$OSD_ID/keyring" --name "osd.$OSD_ID" \
  --add-key "$OSD_SECRET" >/dev/null
log "osd.$OSD_ID mkfs ($OBJECTSTORE)"
ceph-osd -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" 2>&1 | grep -v '^$' | tail -n 3 || true
ceph-osd -i "$OSD_ID"
osd_up() { ceph osd stat -f json | /usr/bin/python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["num_up_osds"] != 1)'; }
wait_until 120 "osd up" osd_up
ceph osd stat
log "osd up"

# ---- mds + cephfs ---------------------------------------------------------
mkdir -p "$CEPH_DIR/mds/ceph-a"
ceph auth get-or-create mds.a mon 'allow profile mds' osd 'allow rwx' mds 'allow *' mgr 'allow profile mds' \
  -o "$CEPH_DIR/mds/ceph-a/keyring"
ceph-mds -i a
ceph osd pool create "${FS_NAME}_metadata" 8 >/dev/null
ceph osd pool create "${FS_NAME}_data" 8 >/dev/null
ceph fs new "$FS_NAME" "${FS_NAME}_metadata" "${FS_NAME}_data"
log "waiting for mds active"
mds_active() { ceph mds stat | grep -q 'up:active'; }
wait_until "$TIMEOUT" "mds active" mds_active
ceph mds stat
log "cephfs active"

# ---- optional radosgw -----------------------------------------------------
if [ "$WITH_RGW" = 1 ]; then
  mkdir -p "$CEPH_DIR/rgw/ceph-rgw.a"
  ceph auth get-or-create client.rgw.a mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
    -o "$CEPH_DIR/rgw/ceph-rgw.a/keyring"
  radosgw -n client.rgw.a
  wait_until "$TIMEOUT" "radosgw http" curl -fsS -o /dev/null "http://127.0.0.1:$RGW_PORT/"
  curl -sS "http://127.0.0.1:$RGW_PORT/"; echo
  log "radosgw up on 127.0.0.1:$RGW_PORT"
  # The S3 user of the tests; keys generated here, kept in a 0600 file.
  S3_ACCESS=epochfs$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
  S3_SECRET=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077; printf 'RGW_ACCESS_KEY=%s\nRGW_SECRET_KEY=%s\n' "$S3_ACCESS" "$S3_SECRET" > "$CEPH_DIR/s3.env")
  # radosgw-admin takes the keys only as arguments: it runs once, here, on
  # the test machine, and the keys are random per cluster.
  radosgw-admin user create --uid=epochfs --display-name=EpochFS-tests \
    --access-key="$S3_ACCESS" --secret-key="$S3_SECRET" >/dev/null
  log "s3 user epochfs created (keys in $CEPH_DIR/s3.env)"
fi

# ---- wait for HEALTH_OK and all PGs active+clean ---------------------------
healthy() { ceph status -f json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
pg = s["pgmap"]
clean = sum(x["count"] for x in pg.get("pgs_by_state", []) if x["state_name"] == "active+clean")
sys.exit(0 if s["health"]["status"] == "HEALTH_OK" and clean == pg["num_pgs"] else 1)'; }
wait_until "$TIMEOUT" "HEALTH_OK + all PGs active+clean" healthy
ceph -s
{
  echo "CEPH_CONF=$CEPH_CONF"
  echo "CEPH_MON=127.0.0.1:$MON_V2_PORT"
  echo "MON_V2_PORT=$MON_V2_PORT"
  echo "MON_V1_PORT=$MON_V1_PORT"
  echo "FS_NAME=$FS_NAME"
  [ "$WITH_RGW" = 1 ] && echo "RGW_ENDPOINT=http://127.0.0.1:$RGW_PORT"
} > "$CEPH_DIR/env"
trap - ERR
log "done. export CEPH_CONF=$CEPH_CONF"
