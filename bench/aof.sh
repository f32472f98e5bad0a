#!/usr/bin/env bash
# bench/aof.sh — SET throughput with the append-only file on, Tessera next
# to Redis 7 in one run (bench/harness/compare.sh; ratios are relative to
# the first server of each fsync policy: redis-always / redis-everysec).
#
#   bench/aof.sh [NAME=CMD ...]
#
# Every server gets a fresh temporary directory for its AOF. Environment as
# bench/compare.sh (BENCH_SCALE, BENCH_ROUNDS, BENCH_TESTS ...); defaults
# to the SET tests. TESSERA_BENCH_BIN / BENCH_SKIP_BUILD as there. Also:
#
#   BENCH_AOF_FSYNC="always everysec"  the appendfsync policies to run
#   BENCH_AOF_DIR=/path      put each server's AOF in /path/<server name>/
#                            (e.g. a real slow disk) instead of a fresh
#                            temporary directory; the directories must not
#                            exist yet (they are created, and removed at exit)
#   BENCH_SLOW_FSYNC_MS=N    emulate a disk whose fsync takes N ms: mount
#                            bench/slowfs.py (FUSE passthrough, needs
#                            libfuse2 + `pip install fusepy`) over a
#                            temporary backing directory and put every
#                            server's AOF on it, one subdirectory each.
#                            N=0 is the control (FUSE cost, no delay).
#                            Prints, per server, slowfs's counts of fsyncs,
#                            FUSE write requests, SET records in the AOF
#                            and SET records per fsync (whole run, probes
#                            included), and the mean fsync time as slowfs
#                            served it (fsync_ms = delay + real_ms, the
#                            backing disk's fdatasync); saved in
#                            $OUT_DIR/slowfs.txt. Automatic AOF rewrites
#                            are off in this mode (they would drop records
#                            from the count).
#
# The harness turns persistence off after starting a server (CONFIG SET
# appendonly no); this script hands it a redis-cli wrapper that skips that
# one command, so the AOF stays on. The script unmounts slowfs and removes
# what it created on exit, also on failure or Ctrl-C.
#
# Quick run: BENCH_SCALE=0.05 BENCH_MEM_KEYS=0 bench/aof.sh
# Slow disk: BENCH_SLOW_FSYNC_MS=5 BENCH_AOF_FSYNC=always BENCH_TESTS=set_p16 bench/aof.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release
  fi
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera
fi
[ -x "$BIN" ] || { echo "bench/aof.sh: $BIN is not an executable" >&2; exit 1; }
export BENCH_TESTS=${BENCH_TESTS:-"set_p1 set_p16"}
export BENCH_MEM_KEYS=${BENCH_MEM_KEYS:-0}
POLICIES=${BENCH_AOF_FSYNC:-"always everysec"}
SLOW_MS=${BENCH_SLOW_FSYNC_MS:-}
AOF_BASE=${BENCH_AOF_DIR:-}
export OUT_DIR=${OUT_DIR:-./bench-results/$(date +%Y%m%d-%H%M%S)}

# ------------------------------------------------------------ cleanup
WORK=""        # temporary directory: redis-cli wrapper, slowfs backing + mount
MNT=""         # slowfs mount point
FS_PID=""      # slowfs process
H_PID=""       # the harness (it stops its servers on TERM and on exit)
MADE_DIRS=()   # server directories created under BENCH_AOF_DIR
cleanup() {
  local rc=$? i d
  trap - EXIT INT TERM
  # The servers first (they hold files on the mount): the harness stops
  # them when it ends; it acts on TERM once its current load run is over.
  if [ -n "$H_PID" ] && kill -0 "$H_PID" 2>/dev/null; then
    kill -TERM "$H_PID" 2>/dev/null || true
    for i in $(seq 600); do kill -0 "$H_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
    fusermount -u "$MNT" 2>/dev/null || fusermount -uz "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
  fi
  if [ -n "$FS_PID" ]; then
    for i in $(seq 20); do kill -0 "$FS_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$FS_PID" 2>/dev/null || true
    wait "$FS_PID" 2>/dev/null || true
  fi
  if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
  for d in "${MADE_DIRS[@]+"${MADE_DIRS[@]}"}"; do rm -rf "$d"; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------ AOF directories
# aof_dir NAME: sets DIRARG to the --dir argument for server NAME (a shell
# word for the harness to expand; by default a fresh temporary directory
# per start).
aof_dir() {
  if [ -n "$AOF_BASE" ]; then
    local d="$AOF_BASE/$1"
    [ ! -e "$d" ] || { echo "bench/aof.sh: $d already exists" >&2; exit 1; }
    mkdir -p "$d"
    MADE_DIRS+=("$d")
    DIRARG=$(printf '%q' "$d")
  else
    DIRARG='$(mktemp -d)'
  fi
}

WORK=$(mktemp -d /tmp/aofbench.XXXXXX)
mkdir -p "$OUT_DIR"

# The harness turns persistence off after starting each server ("belt and
# braces": redis-cli CONFIG SET appendonly no), which would leave nothing
# to measure here. Give it a redis-cli that skips exactly that command.
REAL_CLI=$(command -v "${REDIS_CLI:-redis-cli}") || { echo "bench/aof.sh: redis-cli not found" >&2; exit 1; }
cat >"$WORK/redis-cli" <<CLI
#!/usr/bin/env bash
# written by bench/aof.sh: keep the AOF on
case " \$* " in
  *" CONFIG SET appendonly no "*) echo OK; exit 0 ;;
esac
exec $(printf '%q' "$REAL_CLI") "\$@"
CLI
chmod +x "$WORK/redis-cli"
export REDIS_CLI=$WORK/redis-cli

if [ -n "$SLOW_MS" ]; then
  [ -z "$AOF_BASE" ] || { echo "bench/aof.sh: BENCH_SLOW_FSYNC_MS and BENCH_AOF_DIR exclude each other" >&2; exit 1; }
  mkdir -p "$WORK/backing" "$WORK/mnt"
  # Own session: a Ctrl-C must not unmount it under the running servers
  # (libfuse exits on SIGINT); cleanup unmounts it after they stopped.
  setsid python3 "$ROOT/bench/slowfs.py" "$WORK/backing" "$WORK/mnt" \
    --fsync-ms "$SLOW_MS" --stats "$WORK/stats.json" >"$OUT_DIR/slowfs.log" 2>&1 &
  FS_PID=$!
  for _ in $(seq 50); do
    mountpoint -q "$WORK/mnt" && break
    kill -0 "$FS_PID" 2>/dev/null || { cat "$OUT_DIR/slowfs.log" >&2; echo "bench/aof.sh: slowfs failed" >&2; exit 1; }
    sleep 0.1
  done
  mountpoint -q "$WORK/mnt" || { echo "bench/aof.sh: slowfs did not mount" >&2; exit 1; }
  MNT=$WORK/mnt
  AOF_BASE=$MNT
  echo "aof.sh: AOF directories on slowfs (fsync +${SLOW_MS} ms) at $MNT"
fi

QBIN=$(printf '%q' "$BIN")
EXTRA=""
# On slowfs: no automatic AOF rewrite (past 64 MB it would replace the
# SET records counted below with an RDB base, and time the rewrite too).
if [ -n "$SLOW_MS" ]; then EXTRA="--auto-aof-rewrite-percentage 0"; fi
SERVERS=()
for p in $POLICIES; do
  aof_dir "redis-$p"
  SERVERS+=("redis-$p=redis-server --bind 127.0.0.1 --port \$PORT --save '' --appendonly yes --dir $DIRARG --appendfsync $p $EXTRA")
  aof_dir "tessera-$p"
  SERVERS+=("tessera-$p=$QBIN --port \$PORT --bind 127.0.0.1 --appendonly yes --dir $DIRARG --appendfsync $p $EXTRA")
done

# In the background, so that a signal reaches our trap at once.
"$ROOT/bench/harness/compare.sh" "${SERVERS[@]}" "$@" &
H_PID=$!
wait "$H_PID"
H_PID=""

if [ -n "$SLOW_MS" ]; then
  sleep 0.6   # slowfs rewrites its counters every 0.5 s
  {
    echo
    echo "slowfs (fsync +${SLOW_MS} ms), whole run including probes:"
    printf '%-18s %8s %8s %11s %9s %10s %9s %9s\n' server fsyncs writes bytes sets sets/fsync fsync_ms real_ms
    for name in $(ls "$WORK/backing"); do
      sets=$(find "$WORK/backing/$name" -name '*.aof' -exec cat {} + | grep -ac $'^SET\r$' || true)
      python3 - "$WORK/stats.json" "$name" "$sets" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])).get(sys.argv[2], {})
f, sets = s.get("fsyncs", 0), int(sys.argv[3] or 0)
ms = lambda k: 1e3 * s.get(k, 0) / f if f else 0
print("%-18s %8d %8d %11d %9d %10.1f %9.3f %9.3f" % (sys.argv[2], f, s.get("writes", 0),
      s.get("bytes", 0), sets, sets / f if f else 0, ms("fsync_s"), ms("fsync_real_s")))
EOF
    done
  } | tee "$OUT_DIR/slowfs.txt"
fi
