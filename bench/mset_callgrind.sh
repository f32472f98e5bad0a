#!/usr/bin/env bash
# bench/mset_callgrind.sh — instructions per MSET of 10 keys at several
# shard counts (issue 27: the multi-shard cost that grows with N).
#
#   bench/mset_callgrind.sh BIN [SHARDS...]      (default shards: 2 32)
#
# Runs BIN under `valgrind --tool=callgrind` once per shard count, with
# shard consolidation on (BENCH_CONSOLIDATION=no: off), loads it with redis-benchmark (BENCH_CLIENTS
# clients, default 50; pipeline BENCH_PIPELINE, default 16) sending
# `MSET k1:__rand_int__ v ... k10:__rand_int__ v`, zeroes the counters
# after a warm-up of 2000 commands, and dumps them after BENCH_N commands
# (default 20000). Prints the server's instructions (all threads) per
# command.
# BENCH_TEST=set sends `SET key:__rand_int__ <64 bytes>` instead (one key:
# what a round costs per loop held, without the multi-shard work);
# BENCH_TEST=mget10 `MGET` of ten keys, BENCH_TEST=exists10 `EXISTS` of ten
# keys (the same keys as MSET's: k1:__rand_int__ ..., or key:__rand_int__
# with BENCH_WORKLOAD=tx, where they exist).
# BENCH_WORKLOAD=tx: bench/tx.sh's (and bench/many_cores.sh's) workload
# instead: keys key:__rand_int__ from a space of 100,000 (-r 100000),
# 64-byte values, the space preloaded (before the warm-up, outside the
# counts), so every MSET overwrites ten existing keys as there.
# Instruction counts do not depend on the machine's load, so this is the
# figure to compare before/after on a shared machine; throughput under
# valgrind means nothing.
#
# Consolidation under valgrind: valgrind runs one thread at a time and
# slowly, so a hub round lasts longer than `host::STUCK` and the watchdog
# gives every shard back to its own thread (and bursts spread them): the
# run then measures unconsolidated shards. To measure every shard on one
# hub, build BIN with, in src/server/host.rs (never commit it):
#   MERGE_BELOW = 1_000_000, SPREAD_BUSY = 2_000, STUCK = 3600 s
# A quick build is enough for ratios:
#   CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
#     cargo build --release
# The slowlog threshold is raised so that commands slowed by valgrind are
# not logged (that would add the slowlog's cost to every command).
#
# The dumps are kept (MSET_CG_DIR, default a temporary directory that is
# printed) for `callgrind_annotate`.
set -euo pipefail

BIN=${1:?usage: $0 BIN [SHARDS...]}
shift
if [ $# -gt 0 ]; then SHARDS=("$@"); else SHARDS=(2 32); fi
CLIENTS=${BENCH_CLIENTS:-50}
PIPELINE=${BENCH_PIPELINE:-16}
N=${BENCH_N:-20000}
DIR=${MSET_CG_DIR:-$(mktemp -d /tmp/mset_cg.XXXXXX)}
mkdir -p "$DIR"
PORT=${BENCH_PORT:-7391}
CONSOLIDATION=${BENCH_CONSOLIDATION:-yes}
# BENCH_CACHE_SIM=1: valgrind's cache simulation too (D1/LL misses in the
# dumps, for callgrind_annotate; twice as slow). BENCH_LL=size,assoc,line
# sets the simulated last level (valgrind takes the L3, 32 MiB here, where
# nothing misses): BENCH_LL=1048576,8,64 makes it this machine's per-core
# L2, so LL misses are what the L2 does not hold.
CACHE_SIM=()
[ -n "${BENCH_CACHE_SIM:-}" ] && CACHE_SIM=(--cache-sim=yes)
[ -n "${BENCH_LL:-}" ] && CACHE_SIM+=("--LL=$BENCH_LL")

command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found" >&2; exit 1; }

TEST=${BENCH_TEST:-mset10}
WORKLOAD=${BENCH_WORKLOAD:-}
RANGE=1000000
VAL64=$(printf 'v%.0s' $(seq 1 64))
case "$TEST" in
  mset10)
    CMD=(mset)
    for k in 1 2 3 4 5 6 7 8 9 10; do
      if [ "$WORKLOAD" = tx ]; then CMD+=("key:__rand_int__" "$VAL64"); else CMD+=("k$k:__rand_int__" v); fi
    done
    ;;
  mget10|exists10)
    CMD=("${TEST%10}")
    for k in 1 2 3 4 5 6 7 8 9 10; do
      if [ "$WORKLOAD" = tx ]; then CMD+=("key:__rand_int__"); else CMD+=("k$k:__rand_int__"); fi
    done
    ;;
  set) CMD=(set "key:__rand_int__" "$VAL64") ;;
  *) echo "BENCH_TEST: mset10, mget10, exists10 or set" >&2; exit 1 ;;
esac
case "$WORKLOAD" in
  "") ;;
  tx) RANGE=100000 ;;
  *) echo "BENCH_WORKLOAD: tx or unset" >&2; exit 1 ;;
esac
# The tx workload's keyspace, as bench/tx.sh preloads it.
preload() {
  [ "$WORKLOAD" = tx ] || return 0
  awk -v n="$RANGE" -v v="$VAL64" 'BEGIN {
    for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$64\r\n%s\r\n", i, v
  }' | redis-cli -p "$PORT" --pipe >/dev/null
}

for s in "${SHARDS[@]}"; do
  out="$DIR/cg.$TEST.p$PIPELINE.s$s"
  rm -f "$out" "$out".*
  # Set by hand: Tessera re-executes itself to set it otherwise, which
  # valgrind would follow into a second process.
  GLIBC_TUNABLES=glibc.malloc.tcache_count=256 valgrind --tool=callgrind "${CACHE_SIM[@]}" \
    --callgrind-out-file="$out" "$BIN" --port "$PORT" --bind 127.0.0.1 \
    --shards "$s" --shard-consolidation "$CONSOLIDATION" --save '' --appendonly no \
    --slowlog-log-slower-than 1000000000 >"$DIR/log.s$s" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  if [ "$CONSOLIDATION" = yes ]; then
    # Until every shard is on one hub (a hub-held build), 60 s at most.
    for _ in $(seq 1 120); do
      redis-cli -p "$PORT" info server 2>/dev/null | grep -q '^shard_threads_active:1' && break
      sleep 0.5
    done
  fi
  preload
  redis-benchmark -p "$PORT" -n 2000 -P "$PIPELINE" -c "$CLIENTS" -r "$RANGE" -q \
    "${CMD[@]}" >/dev/null 2>&1
  callgrind_control -z "$pid" >/dev/null 2>&1
  redis-benchmark -p "$PORT" -n "$N" -P "$PIPELINE" -c "$CLIENTS" -r "$RANGE" -q \
    "${CMD[@]}" >"$DIR/bench.s$s" 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  total=0
  for f in "$out".*; do
    t=$(awk '/^(summary|totals):/ { print $2; exit }' "$f")
    total=$((total + ${t:-0}))
  done
  echo "test=$TEST${WORKLOAD:+ workload=$WORKLOAD} shards=$s consolidation=$CONSOLIDATION pipeline=$PIPELINE clients=$CLIENTS instructions_per_op=$((total / N))"
done
echo "dumps kept in $DIR"
