#!/usr/bin/env bash
# bench/replication.sh — Tessera as a replication master next to Redis 7
# as one, in one run, each with one real redis-server replica attached
# (the same replica binary for both, so only the master differs).
#
#   bench/replication.sh
#
# Per master (redis, tessera), with a fresh replica:
#
#   1. SET at pipeline 16 (redis-benchmark -c 50 -P 16 -r 1000000): the
#      master's CPU per operation (utime+stime from /proc, whole process,
#      replication threads included) and ops/s; then the replication lag
#      after the load (ms until the replica's offset equals the master's).
#   2. Full sync of BENCH_REPL_KEYS keys (default 1M, loaded with
#      redis-cli --pipe, named as redis-benchmark's -r keys) under writes
#      (redis-benchmark SET at P16 over the same keys and value size, so
#      the dataset does not grow: what grows is the sync's cost): the sync time (replica asks → link up with
#      nothing in progress), and the master's peak memory over its memory
#      before the sync. Memory is PSS summed over the master and its
#      children (Redis forks for the sync; PSS counts the pages the fork
#      shares with its parent once), sampled every 20 ms. Then the lag
#      once the writer stops.
#
# Environment:
#   TESSERA_BENCH_BIN   server binary (skips the build)
#   BENCH_SKIP_BUILD=1  use the existing release build
#   BENCH_REPL_KEYS     keys for the full sync (default 1000000)
#   BENCH_REPL_OPS      SET operations for the CPU test (default 2000000)
#   BENCH_REPL_VALUE    value size in bytes of the loaded keys and of the
#                       writer's SETs (default 18)
#   BENCH_REPL_MASTERS  which masters to run (default "redis tessera")
#   BENCH_REPL_SKIP_CPU=1  only the full sync (skip the SET P16 test)
#   BENCH_REPL_DISKLESS yes|no  repl-diskless-sync of both masters (default yes)
#   BENCH_SERVER_CPUS / BENCH_CLIENT_CPUS  taskset lists for the masters and
#                       for the load generator + replica (default: none)
#   OUT_DIR             where report.md goes (default ./bench-results/<ts>)
#
# A measurement, never a pass/fail test. On a 2-core machine pin CPUs and
# repeat; the replica and the load generator compete with the master.
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
[ -x "$BIN" ] || { echo "bench/replication.sh: $BIN is not an executable" >&2; exit 1; }
for t in redis-server redis-cli redis-benchmark python3; do
  command -v "$t" >/dev/null || { echo "bench/replication.sh: $t not found" >&2; exit 1; }
done

KEYS=${BENCH_REPL_KEYS:-1000000}
OPS=${BENCH_REPL_OPS:-2000000}
DISKLESS=${BENCH_REPL_DISKLESS:-yes}
VALUE=${BENCH_REPL_VALUE:-18}
MASTERS=${BENCH_REPL_MASTERS:-redis tessera}
OUT_DIR=${OUT_DIR:-./bench-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d /tmp/replbench.XXXXXX)
HZ=$(getconf CLK_TCK)

pin() { # pin CPUS CMD...: run CMD under taskset when CPUS is set
  local cpus=$1; shift
  if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

spawn() { # spawn CPUS LOG CMD...: CMD in the background (taskset execs it,
  # so $! is the command itself, whose /proc figures we read); sets SPAWNED
  local cpus=$1 log=$2; shift 2
  if [ -n "$cpus" ]; then
    taskset -c "$cpus" "$@" >"$log" 2>&1 &
  else
    "$@" >"$log" 2>&1 &
  fi
  SPAWNED=$!
  PIDS+=("$SPAWNED")
}

PIDS=()
cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_ping() { # wait_ping PORT
  local i
  for i in $(seq 200); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  echo "bench/replication.sh: no server on port $1" >&2; exit 1
}

field() { # field PORT SECTION NAME
  redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v k="$3" '$1 == k { print $2 }'
}

cpu_ticks() { # utime + stime of PID
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

pss_kb() { # PSS of PID and its children, in kB
  local total=0 p v
  for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    v=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

now_ms() { date +%s%3N; }

start_master() { # start_master NAME PORT DIR: sets MPID
  local name=$1 port=$2 dir=$3
  local common=(--port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir"
    --repl-diskless-sync "$DISKLESS" --repl-diskless-sync-delay 0)
  local exe=$BIN
  [ "$name" = redis ] && exe=redis-server
  spawn "${BENCH_SERVER_CPUS:-}" "$OUT_DIR/$name-master.log" "$exe" "${common[@]}"
  MPID=$SPAWNED
  wait_ping "$port"
}

start_replica() { # start_replica NAME MASTER_PORT: sets RPORT RPID
  RPORT=$(free_port)
  mkdir -p "$WORK/replica-$RPORT"
  spawn "${BENCH_CLIENT_CPUS:-}" "$OUT_DIR/$1-replica-$RPORT.log" redis-server \
    --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK/replica-$RPORT" --replicaof 127.0.0.1 "$2"
  RPID=$SPAWNED
  wait_ping "$RPORT"
}

stop_replica() {
  redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$RPID" 2>/dev/null || true
}

wait_link_up() { # wait_link_up REPLICA_PORT: until synced and loaded (bounded 600 s)
  local i
  for i in $(seq 30000); do
    if [ "$(field "$1" replication master_link_status)" = up ] \
      && [ "$(field "$1" replication master_sync_in_progress)" = 0 ]; then
      return 0
    fi
    sleep 0.02
  done
  echo "bench/replication.sh: the replica on $1 never synced" >&2; exit 1
}

lag_ms() { # lag_ms MASTER_PORT REPLICA_PORT: ms until the offsets match (bounded)
  local t0 i m r
  t0=$(now_ms)
  for i in $(seq 30000); do
    m=$(field "$1" replication master_repl_offset)
    r=$(field "$2" replication slave_repl_offset)
    [ -n "$m" ] && [ "$m" = "$r" ] && { echo $(( $(now_ms) - t0 )); return; }
    sleep 0.01
  done
  echo "timeout"
}

load_keys() { # load_keys PORT: KEYS string keys through redis-cli --pipe,
  # named as redis-benchmark's -r keys (key:%012d), so the writer overwrites
  python3 - "$KEYS" "$VALUE" <<'EOF' | redis-cli -p "$1" --pipe >/dev/null
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%012d" % i
    v = (b"value-%012d" % i).ljust(size, b"v")[:size]
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
EOF
}

REPORT="$OUT_DIR/report.md"
{
  echo "# Replication: one replica attached (redis-server $(redis-server --version | awk '{print $3}'))"
  echo
  echo "diskless=$DISKLESS keys=$KEYS value=$VALUE set_ops=$OPS"
  echo
  echo "| master | SET P16 ops/s | master CPU µs/op | lag after load ms | full sync s | peak PSS over before | PSS before MB | lag after sync ms |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$REPORT"

for name in $MASTERS; do
  port=$(free_port)
  dir="$WORK/$name"
  mkdir -p "$dir"
  start_master "$name" "$port" "$dir"

  # 1. SET P16 with a replica attached.
  ops_s=- cpu_us=- lag1=-
  if [ "${BENCH_REPL_SKIP_CPU:-0}" != 1 ]; then
    start_replica "$name" "$port"
    wait_link_up "$RPORT"
    c0=$(cpu_ticks "$MPID")
    t0=$(now_ms)
    pin "${BENCH_CLIENT_CPUS:-}" redis-benchmark -p "$port" -t set -n "$OPS" -c 50 -P 16 \
      -r 1000000 -q >"$OUT_DIR/$name-set.txt" 2>&1
    t1=$(now_ms)
    c1=$(cpu_ticks "$MPID")
    lag1=$(lag_ms "$port" "$RPORT")
    cpu_us=$(python3 -c "print('%.3f' % (($c1 - $c0) / $HZ * 1e6 / $OPS))")
    ops_s=$(python3 -c "print('%.0f' % ($OPS / max(1, $t1 - $t0) * 1000))")
    stop_replica
  fi

  # 2. Full sync of KEYS keys under writes.
  redis-cli -p "$port" flushall >/dev/null
  load_keys "$port"
  sleep 1
  before=$(pss_kb "$MPID")
  spawn "${BENCH_CLIENT_CPUS:-}" /dev/null redis-benchmark -p "$port" -t set -n 100000000 \
    -c 10 -P 16 -r "$KEYS" -d "$VALUE" -q
  WPID=$SPAWNED
  sleep 0.5
  t0=$(now_ms)
  start_replica "$name" "$port"
  peak=$before
  synced=0
  for i in $(seq 30000); do
    p=$(pss_kb "$MPID")
    [ "$p" -gt "$peak" ] && peak=$p
    if [ "$(field "$RPORT" replication master_link_status)" = up ] \
      && [ "$(field "$RPORT" replication master_sync_in_progress)" = 0 ]; then
      synced=1
      break
    fi
    sleep 0.02
  done
  t1=$(now_ms)
  kill "$WPID" 2>/dev/null || true
  wait "$WPID" 2>/dev/null || true
  [ "$synced" = 1 ] || { echo "bench/replication.sh: $name: the sync never ended" >&2; exit 1; }
  lag2=$(lag_ms "$port" "$RPORT")
  sync_s=$(python3 -c "print('%.2f' % (($t1 - $t0) / 1000))")
  over=$(python3 -c "print('%.1f %%' % (100.0 * ($peak - $before) / max(1, $before)))")
  before_mb=$(python3 -c "print('%.0f' % ($before / 1024))")
  stop_replica
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$MPID" 2>/dev/null || true

  echo "| $name | $ops_s | $cpu_us | $lag1 | $sync_s | $over | $before_mb | $lag2 |" >>"$REPORT"
done

cat "$REPORT"
