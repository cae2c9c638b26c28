#!/usr/bin/env bash
# Runs the independently built csi-sanity binary against bin/csi-driver --mode all,
# over a small posix dataset, as the outside check does. Needs root (FUSE, bind mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
SANITY=${CSI_SANITY:-.tools/bin/csi-sanity}
[ -x "$SANITY" ] || { echo "csi-sanity.sh: $SANITY missing: run make tools" >&2; exit 1; }
[ -x bin/csi-driver ] && [ -x bin/cachefs ] || { echo "csi-sanity.sh: run make build first" >&2; exit 1; }

work=$(mktemp -d /tmp/epochfs-sanity-XXXXXX)
driver_pid=""
cleanup() {
  set +e
  if [ -n "$driver_pid" ]; then kill "$driver_pid" 2>/dev/null; wait "$driver_pid" 2>/dev/null; fi
  # unmount anything the run left behind under the work dir (there should be nothing)
  grep -o " $work[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/data/a" "$work/kubelet"
printf 'hello\n' > "$work/data/a/hello.txt"
head -c 100000 /dev/urandom > "$work/data/a/blob.bin"
printf 'source: %s\ncacheSize: 64Mi\n' "$work/data" > "$work/params.yaml"

bin/csi-driver --endpoint "unix://$work/csi.sock" --nodeid sanity-node --mode all \
  --state-dir "$work/state" --cache-root "$work/cache" --cachefs-binary "$PWD/bin/cachefs" \
  --allowed-local-roots "$work/data" --kubelet-dir "$work/kubelet" \
  --log-format text --log-level warn 2> "$work/driver.log" &
driver_pid=$!
for _ in $(seq 100); do [ -S "$work/csi.sock" ] && break; sleep 0.1; done

status=0
"$SANITY" --csi.endpoint "$work/csi.sock" --csi.testvolumeparameters "$work/params.yaml" \
  --csi.mountdir "$work/kubelet/target" --csi.stagingdir "$work/kubelet/staging" "$@" || status=$?
if [ "$status" != 0 ]; then
  echo "csi-sanity failed; driver log:" >&2
  tail -50 "$work/driver.log" >&2
fi
exit "$status"
