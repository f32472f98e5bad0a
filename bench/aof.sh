#!/usr/bin/env bash
# bench/aof.sh — SET throughput with the append-only file on, Tessera next
# to Redis 7 in one run (bench/harness/compare.sh; ratios are relative to
# the first server of each fsync policy: redis-always / redis-everysec).
#
#   bench/aof.sh [NAME=CMD ...]
#
# Every server gets a fresh temporary directory for its AOF. Environment as
# bench/compare.sh (BENCH_SCALE, BENCH_ROUNDS, BENCH_TESTS ...); defaults
# to the SET tests. TESSERA_BENCH_BIN / BENCH_SKIP_BUILD as there.
#
# Quick run: BENCH_SCALE=0.05 BENCH_MEM_KEYS=0 bench/aof.sh
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

QBIN=$(printf '%q' "$BIN")
AOF='--appendonly yes --dir $(mktemp -d)'
SERVERS=(
  "redis-always=redis-server --bind 127.0.0.1 --port \$PORT --save '' $AOF --appendfsync always"
  "tessera-always=$QBIN --port \$PORT --bind 127.0.0.1 $AOF --appendfsync always"
  "redis-everysec=redis-server --bind 127.0.0.1 --port \$PORT --save '' $AOF --appendfsync everysec"
  "tessera-everysec=$QBIN --port \$PORT --bind 127.0.0.1 $AOF --appendfsync everysec"
)
exec "$ROOT/bench/harness/compare.sh" "${SERVERS[@]}" "$@"
