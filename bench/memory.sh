#!/usr/bin/env bash
# bench/memory.sh — bytes per key, Tessera next to Redis 7, in one run.
#
#   bench/memory.sh            # 1,000,000 keys, values of 16 and 100 bytes
#   KEYS=10000000 bench/memory.sh
#
# For each value size and each server (redis-server with persistence off,
# Tessera release build with its default shard count): start it empty,
# note RSS, load KEYS keys `key:<i>` with a pipelined loader (redis-cli
# --pipe), note RSS and used_memory again, and report
#   bytes/key = (RSS after - RSS before) / KEYS
# plus used_memory/key and the worst latency `redis-cli --latency` saw
# from a second client (PING round trips, 10 ms apart) while loading.
#
# Then the way down (issue 28), per server: 200 connections each SET a
# 1 MB value, plus 300,000 small keys; used_memory and RSS loaded; RSS 1 s
# and 15 s after FLUSHALL; used_memory and mem_fragmentation_ratio at 15 s;
# the worst PING round trip meanwhile (bench/memory_return.py).
#
# Environment: KEYS, SIZES ("16 100"), PORT_BASE (7435), BENCH_SKIP_BUILD=1,
# TESSERA_BENCH_BIN, TESSERA_ARGS (extra server arguments, e.g. "--shards 1"),
# TESSERA_BASE_BIN (a previous build: adds "base" rows, for before/after in
# one run), RETURN=0 (skip the way-down table), BYTES=0 (skip bytes/key).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KEYS=${KEYS:-1000000}
SIZES=${SIZES:-"16 100"}
PORT_BASE=${PORT_BASE:-7435}
if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  [ "${BENCH_SKIP_BUILD:-0}" = 1 ] || cargo build --release -q
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera
fi
TMP=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2> /dev/null || true; rm -rf "$TMP"' EXIT

rss() { awk '/VmRSS/ {printf "%d\n", $2 * 1024}' "/proc/$1/status"; }
field() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'; }

# The RESP for KEYS SETs of `size`-byte values, generated once per size.
gen() {
  awk -v n="$KEYS" -v size="$1" 'BEGIN {
    v = sprintf("%0" size "d", 0)
    for (i = 0; i < n; i++) {
      k = "key:" i
      printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, size, v
    }
  }' > "$TMP/load.$1"
}

run() { # name port size cmd...
  local name=$1 port=$2 size=$3; shift 3
  "$@" > "$TMP/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 100); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.05; done
  if ! kill -0 $pid 2> /dev/null; then
    echo "$name did not start (port $port taken?):" >&2; cat "$TMP/$name.log" >&2; exit 1
  fi
  local before; before=$(rss $pid)
  timeout 600 redis-cli -p "$port" --latency -i 0.01 > "$TMP/lat" 2>&1 &
  local lat=$!
  local t0; t0=$(date +%s.%N)
  redis-cli -p "$port" --pipe < "$TMP/load.$size" > /dev/null
  local t1; t1=$(date +%s.%N)
  sleep 0.2
  kill -INT $lat 2> /dev/null || true
  wait $lat 2> /dev/null || true
  kill -0 $pid 2> /dev/null || { echo "$name died:" >&2; cat "$TMP/$name.log" >&2; exit 1; }
  local after; after=$(rss $pid)
  local used; used=$(field "$port" used_memory)
  local n; n=$(redis-cli -p "$port" dbsize)
  # Not a terminal: redis-cli prints "min max avg samples" lines.
  local max; max=$(tr '\r' '\n' < "$TMP/lat" | awk 'NF == 4 && $2 > m {m = $2} END {print m + 0}')
  redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || kill $pid
  wait $pid 2> /dev/null || true
  printf '%-8s %6s %10s %12.1f %12.1f %10s %10.1f\n' "$name" "$size" "$n" \
    "$(echo "($after - $before) / $KEYS" | bc -l)" "$(echo "$used / $KEYS" | bc -l)" \
    "${max:-?}" "$(echo "$KEYS / ($t1 - $t0)" | bc -l)"
}

if [ "${BYTES:-1}" != 0 ]; then
  printf '%-8s %6s %10s %12s %12s %10s %10s\n' server value keys rss_B/key used_B/key max_ms load_ops/s
  for size in $SIZES; do
    gen "$size"
    run redis $PORT_BASE "$size" redis-server --port $PORT_BASE --save '' --appendonly no
    # shellcheck disable=SC2086
    run tessera $((PORT_BASE + 1)) "$size" "$BIN" --port $((PORT_BASE + 1)) --save '' ${TESSERA_ARGS:-}
    if [ -n "${TESSERA_BASE_BIN:-}" ]; then
      # shellcheck disable=SC2086
      run base $((PORT_BASE + 2)) "$size" "$TESSERA_BASE_BIN" --port $((PORT_BASE + 2)) --save '' ${TESSERA_ARGS:-}
    fi
  done
fi

way_down() { # name port cmd...
  local name=$1 port=$2; shift 2
  "$@" > "$TMP/$name.down.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 100); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.05; done
  kill -0 $pid 2> /dev/null || { echo "$name did not start:" >&2; cat "$TMP/$name.down.log" >&2; exit 1; }
  ulimit -n 4096 2> /dev/null || true
  python3 "$ROOT/bench/memory_return.py" "$port" "$pid" "$name"
  redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || kill $pid
  wait $pid 2> /dev/null || true
}

if [ "${RETURN:-1}" != 0 ]; then
  echo
  echo "way down: 200 x SET 1 MB + 300k small keys, then FLUSHALL (MB = 10^6 bytes)"
  printf '%-14s %10s %10s %10s %10s %12s %6s %9s\n' server used_MB rss_MB rss_1s rss_15s used_15s_MB frag ping_max
  way_down redis $PORT_BASE redis-server --port $PORT_BASE --save '' --appendonly no
  # shellcheck disable=SC2086
  way_down tessera $((PORT_BASE + 1)) "$BIN" --port $((PORT_BASE + 1)) --save '' ${TESSERA_ARGS:-}
  if [ -n "${TESSERA_BASE_BIN:-}" ]; then
    # shellcheck disable=SC2086
    way_down base $((PORT_BASE + 2)) "$TESSERA_BASE_BIN" --port $((PORT_BASE + 2)) --save '' ${TESSERA_ARGS:-}
  fi
fi
