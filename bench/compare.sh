#!/usr/bin/env bash
# bench/compare.sh — Tessera next to Redis, side by side, on loopback.
#
#   bench/compare.sh [NAME=CMD ...]
#
# Builds the release binary, then runs bench/harness/compare.sh (a verbatim
# copy of the team's shared benchmark script; read its header for what it
# measures and every environment knob) with three servers:
#
#   redis           redis-server, persistence off (the baseline: ratios are
#                   relative to it)
#   tessera         target/release/tessera --port $PORT --bind 127.0.0.1
#   tessera-1shard  the same with --shards 1
#
# Extra NAME=CMD arguments add more servers (e.g. 'valkey=valkey-server
# --bind 127.0.0.1 --port $PORT --save "" --appendonly no').
#
# Environment: everything compare.sh reads (BENCH_SCALE, BENCH_ROUNDS,
# BENCH_TESTS, BENCH_MEM_KEYS, BENCH_CLIENT_CPUS, BENCH_SERVER_CPUS,
# OUT_DIR, ...) passes through, plus:
#   TESSERA_BENCH_BIN   server binary to use instead of the release build
#                       (skips the build)
#   BENCH_SKIP_BUILD=1  do not run cargo build --release
#   BENCH_NO_1SHARD=1   leave out the --shards 1 variant
#
# Quick smoke run (seconds, not minutes):
#   BENCH_SCALE=0.01 BENCH_MEM_KEYS=0 BENCH_TESTS="set_p1 get_p16" bench/compare.sh
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
[ -x "$BIN" ] || { echo "bench/compare.sh: $BIN is not an executable" >&2; exit 1; }

# The harness runs each CMD as `bash -c "exec $CMD"` with PORT exported, so
# $PORT stays literal here and the binary path is shell-quoted.
QBIN=$(printf '%q' "$BIN")
SERVERS=(
  'redis=redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no'
  "tessera=$QBIN --port \$PORT --bind 127.0.0.1"
)
if [ "${BENCH_NO_1SHARD:-0}" != 1 ]; then
  SERVERS+=("tessera-1shard=$QBIN --port \$PORT --bind 127.0.0.1 --shards 1")
fi

exec "$ROOT/bench/harness/compare.sh" "${SERVERS[@]}" "$@"
