#!/usr/bin/env bash
# bench/bigval_stall.sh — how long one huge value stalls its shard during
# BGSAVE, Tessera next to Redis (issue 6).
#
#   bench/bigval_stall.sh
#
# For each server and size: fill a zset of N members, BGSAVE, probe ZSCORE
# on that key (so on its shard) until the save ends (bench/bigval_probe.py),
# BENCH_RUNS times. The stall is the larger of the BGSAVE reply time and the
# slowest probe. Measurements only: on a shared 2-core machine rerun and
# look at the spread.
#
# Environment: BENCH_SIZES ("1000000 3000000"), BENCH_RUNS (2), BENCH_SMALL
# (0: small keys saved besides the zset), BENCH_SHARDS (2),
# TESSERA_BENCH_BIN (skip the build), BENCH_SKIP_BUILD=1, BEFORE_BIN (a
# second Tessera binary to measure too, e.g. an older build).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SIZES=${BENCH_SIZES:-1000000 3000000}
RUNS=${BENCH_RUNS:-2}
SMALL=${BENCH_SMALL:-0}
SHARDS=${BENCH_SHARDS:-2}
if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  [ "${BENCH_SKIP_BUILD:-0}" = 1 ] || cargo build --release -q
  BIN=$ROOT/target/release/tessera
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() {
  local name=$1 n=$2; shift 2
  local dir port pid
  dir=$(mktemp -d)
  port=$(free_port)
  "$@" --port "$port" --bind 127.0.0.1 --save '' --dir "$dir" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  for r in $(seq "$RUNS"); do
    printf '%-8s run %s: ' "$name" "$r"
    SRVPID=$pid python3 "$ROOT/bench/bigval_probe.py" "$port" "$n" "$SMALL" | tr '\n' ' '
    echo
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

for n in $SIZES; do
  [ -n "${BEFORE_BIN:-}" ] && run before "$n" "$BEFORE_BIN" --shards "$SHARDS"
  run tessera "$n" "$BIN" --shards "$SHARDS"
  run redis "$n" redis-server --appendonly no
done
