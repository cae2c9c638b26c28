#!/bin/bash
# A throw-away NFS-Ganesha (NFSv3, VFS FSAL) with its own rpcbind, inside a
# private network namespace, reachable from the host over a veth pair: the real
# NFS server of the nfs:// backend's tests (internal/testenv/nfs.StartGanesha) and
# of `make bench-nfs`. Debian packages: scripts/nfs-deps.sh.
#
#   scripts/nfs-server.sh start EXPORT_DIR [OWNER_PID]
#       prints NAME=…, ADDR=… (the server's IPv4 address), STATE=… (its state
#       dir) on stdout once rpcbind, MOUNT and NFS answer. The dataset URL is
#       nfs://ADDR/EXPORT_DIR. OWNER_PID (default: the caller's parent) is the
#       process the server belongs to: a later start or `sweep` stops servers
#       whose owner is gone (a test killed before its cleanup ran).
#   scripts/nfs-server.sh stop NAME      stop it and remove the namespace, the veth pair and the state dir
#   scripts/nfs-server.sh sweep          stop every server whose owner is gone
#   scripts/nfs-server.sh list           the servers of this machine
#
# Why a namespace: NFSv3 needs rpcbind on port 111, and Debian's rpcbind binds
# every interface (`-h 127.0.0.1` aborts), so it would clash with a system
# rpcbind and be reachable from the network. In the namespace rpcbind, Ganesha
# and their /run (a private tmpfs) exist only there; the host reaches them at
# ADDR through the veth pair. Needs root (namespaces, veth).
set -euo pipefail
STATE_ROOT=/var/tmp/epochfs-nfs
PREFIX=epochfs-nfs

die() { echo "nfs-server: $*" >&2; exit 1; }

stop_one() { # NAME
  local name=$1 dir=$STATE_ROOT/$1 pid
  for f in ganesha.pid rpcbind.pid wrapper.pid; do
    if [ -f "$dir/$f" ]; then
      pid=$(cat "$dir/$f")
      # Only a process of this server: its cmdline names our state dir or it runs in our namespace.
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(ip netns identify "$pid" 2>/dev/null)" = "$name" ]; then
        kill "$pid" 2>/dev/null || true
      fi
    fi
  done
  for f in ganesha.pid rpcbind.pid wrapper.pid; do
    if [ -f "$dir/$f" ]; then
      pid=$(cat "$dir/$f")
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null && [ "$(ip netns identify "$pid" 2>/dev/null)" = "$name" ] || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null && [ "$(ip netns identify "$pid" 2>/dev/null)" = "$name" ]; then
        kill -9 "$pid" 2>/dev/null || true
      fi
    fi
  done
  [ -f "$dir/veth" ] && ip link del "$(cat "$dir/veth")" 2>/dev/null || true
  ip netns del "$name" 2>/dev/null || true
  rm -rf "$dir"
}

sweep() {
  local name owner
  for name in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true) \
              $(ls "$STATE_ROOT" 2>/dev/null || true); do
    owner=$(echo "$name" | sed -n "s/^$PREFIX-\([0-9]*\)-.*/\1/p")
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
      stop_one "$name"
    fi
  done
}

start() { # EXPORT_DIR OWNER_PID
  local export=$1 owner=$2
  [ -d "$export" ] || die "export dir $export does not exist"
  export=$(cd "$export" && pwd -P)
  command -v ganesha.nfsd >/dev/null && command -v rpcbind >/dev/null || die "ganesha.nfsd or rpcbind missing: run scripts/nfs-deps.sh (make nfs-deps)"
  [ "$(id -u)" = 0 ] || die "needs root (network namespace, veth pair)"
  mkdir -p "$STATE_ROOT"
  # One start at a time on this machine picks an address and creates its
  # links (tests of several packages start servers in parallel).
  exec 9>"$STATE_ROOT/.lock"
  flock 9
  sweep
  local rnd name dir hveth nveth hostip nsip
  # A /30 in 10.250.0.0/16 that no interface of the host uses yet.
  for _ in $(seq 50); do
    rnd=$((RANDOM % 16384))
    hostip="10.250.$((rnd / 64)).$(((rnd % 64) * 4 + 1))"
    nsip="10.250.$((rnd / 64)).$(((rnd % 64) * 4 + 2))"
    if ! ip -4 addr show | grep -q "inet $hostip/\|inet $nsip/" && ! ip link show "enfs$rnd" >/dev/null 2>&1; then
      break
    fi
  done
  name=$PREFIX-$owner-$rnd
  hveth=enfs$rnd
  nveth=enfsp$rnd
  dir=$STATE_ROOT/$name
  mkdir -p "$dir/v4recov"
  ip netns add "$name"
  echo "$hveth" > "$dir/veth"
  trap 'stop_one "$name"' ERR
  ip link add "$hveth" type veth peer name "$nveth"
  ip link set "$nveth" netns "$name"
  ip addr add "$hostip/30" dev "$hveth"
  ip link set "$hveth" up
  ip netns exec "$name" ip link set lo up
  ip netns exec "$name" ip addr add "$nsip/30" dev "$nveth"
  ip netns exec "$name" ip link set "$nveth" up
  flock -u 9

  cat > "$dir/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = 2049;
    MNT_Port = 20048;
    NLM_Port = 0;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}
NFSV4 {
    RecoveryBackend = fs;
    RecoveryRoot = $dir/v4recov;
    Graceless = true;
}
EXPORT_DEFAULTS {
    SecType = sys;
    Squash = No_Root_Squash;
}
EXPORT {
    Export_Id = 1;
    Path = $export;
    Pseudo = $export;
    Access_Type = RO;
    Protocols = 3;
    Transports = TCP;
    PrivilegedPort = false;
    Squash = No_Root_Squash;
    # No attribute caching: tests change files under the server and expect
    # the next GETATTR to see it (Ganesha's default keeps attributes 60 s).
    Attr_Expiration_Time = 0;
    FSAL { Name = VFS; }
    CLIENT { Clients = $hostip; Access_Type = RO; }
}
LOG {
    Default_Log_Level = EVENT;
}
EOF
  # rpcbind and ganesha in the namespace, with a private /run (rpcbind's
  # lock, socket and warm-start files; ganesha's dbus attempts find nothing).
  # No Bind_addr: with only lo and the veth up, ganesha binds every address
  # of the namespace, which is what we want.
  # The new mount namespace starts with a copy of every mount of the host,
  # FUSE mounts of other tests included, and (the host's / being private
  # here) no unmount on the host reaches the copies: a copy would keep that
  # FUSE connection alive after its own process unmounted it, and the
  # mount's serve loops (and so `cachefs mount`'s exit) would wait for it
  # for as long as ganesha runs. So the namespace first drops every FUSE
  # mount it copied (lazily: a busy one goes too).
  ip netns exec "$name" unshare --mount --propagation private bash -c '
    set -e
    dir=$1
    findmnt -rn -o TARGET,FSTYPE | awk '"'"'$2 ~ /^fuse/ && $2 != "fusectl" {print $1}'"'"' | sort -r |
      while read -r m; do umount -l "$(printf "%b" "$m")" 2>/dev/null || true; done
    mount -t tmpfs tmpfs /run
    mkdir -p /run/rpcbind
    chown _rpc /run/rpcbind 2>/dev/null || true
    rpcbind -f -w > "$dir/rpcbind.log" 2>&1 &
    echo $! > "$dir/rpcbind.pid"
    for _ in $(seq 100); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.05; done
    ganesha.nfsd -F -f "$dir/ganesha.conf" -L "$dir/ganesha.log" -p "$dir/ganesha.pidfile" > "$dir/ganesha.stdout" 2>&1 &
    echo $! > "$dir/ganesha.pid"
    wait
  ' wrapper "$dir" </dev/null >"$dir/wrapper.log" 2>&1 9>&- &
  echo $! > "$dir/wrapper.pid"
  # Ready when the portmapper knows MOUNT and NFS over TCP, seen from the host.
  local ok=
  for _ in $(seq 200); do
    if rpcinfo -p "$nsip" 2>/dev/null | grep -q ' tcp .*mountd' && rpcinfo -p "$nsip" 2>/dev/null | grep -q ' 3 *tcp .*nfs'; then
      ok=1; break
    fi
    if [ -f "$dir/ganesha.pid" ] && ! kill -0 "$(cat "$dir/ganesha.pid")" 2>/dev/null; then break; fi
    sleep 0.05
  done
  if [ -z "$ok" ]; then
    echo "nfs-server: ganesha did not come up; its log:" >&2
    tail -20 "$dir/ganesha.log" "$dir/ganesha.stdout" "$dir/rpcbind.log" "$dir/wrapper.log" >&2 2>/dev/null || true
    [ -n "${NFS_SERVER_KEEP:-}" ] || stop_one "$name"
    exit 1
  fi
  trap - ERR
  echo "NAME=$name"
  echo "ADDR=$nsip"
  echo "STATE=$dir"
}

case "${1:-}" in
  start) [ $# -ge 2 ] || die "usage: $0 start EXPORT_DIR [OWNER_PID]"; start "$2" "${3:-$PPID}" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop NAME"; stop_one "$2" ;;
  sweep) sweep ;;
  list) ls "$STATE_ROOT" 2>/dev/null || true ;;
  *) die "usage: $0 start EXPORT_DIR [OWNER_PID] | stop NAME | sweep | list" ;;
esac
