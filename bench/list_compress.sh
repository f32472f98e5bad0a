#!/usr/bin/env bash
# bench/list_compress.sh — `list-compress-depth`: Tessera next to Redis 7.
#
#   bench/list_compress.sh
#
# For each depth in BENCH_DEPTHS (default "0 1"), a fresh Redis and a fresh
# Tessera (both on free loopback ports, `--save ""`), CONFIG SET
# list-compress-depth DEPTH, then:
#
# 1. Memory: one list "big" of M = BENCH_MEM_N (1000000) compressible
#    elements `user:NNNNNNNN:session=active` (28 bytes, 1000 per RPUSH,
#    loaded with redis-cli --pipe): bytes per element from MEMORY USAGE
#    (the list alone), used_memory and VmRSS (after - before the load; these
#    also count whatever else the load left allocated: in some Tessera runs
#    ~11 MB that a DEL of the list does not give back, at any depth).
# 2. Throughput on that list, redis-benchmark -c 50 -n N (BENCH_REQUESTS,
#    default 200000), pipeline 1: LPUSH big V (16-byte V), LPOP big,
#    LRANGE big 0 99 (head), LRANGE big M/2 M/2+99 (middle: compressed nodes
#    under depth 1), LINDEX big M/2.
#
# Prints one table per depth with the ratio Tessera/Redis. Only ever stops
# the PIDs it started. Needs target/release/tessera (built unless
# TESSERA_BENCH_BIN is set).

set -u
set -o pipefail
die() { echo "list_compress.sh: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || die "cannot cd to $ROOT"
DEPTHS=${BENCH_DEPTHS:-0 1}
MEM_N=${BENCH_MEM_N:-1000000}
REQ=${BENCH_REQUESTS:-200000}
RB=${REDIS_BENCHMARK:-redis-benchmark}
CLI=${REDIS_CLI:-redis-cli}
RS=${REDIS_SERVER:-redis-server}
if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  cargo build --release -q -p tessera || die "build failed"
  BIN=$ROOT/target/release/tessera
fi
OUT=$(mktemp -d /tmp/list-compress-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$OUT"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
used() { $CLI -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }

# The load file: RPUSH big of MEM_N elements, 1000 per command.
awk -v n="$MEM_N" 'BEGIN {
  for (i = 0; i < n; i += 1000) {
    c = (n - i < 1000) ? n - i : 1000
    printf "*%d\r\n$5\r\nRPUSH\r\n$3\r\nbig\r\n", c + 2
    for (j = i; j < i + c; j++) printf "$28\r\nuser:%08d:session=active\r\n", j
  }
}' >"$OUT/load.resp"

start() { # name port; sets PID
  if [ "$1" = redis ]; then
    "$RS" --bind 127.0.0.1 --port "$2" --save "" --appendonly no >"$OUT/$1.log" 2>&1 &
  else
    "$BIN" --bind 127.0.0.1 --port "$2" --save "" >"$OUT/$1.log" 2>&1 &
  fi
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 100); do
    $CLI -p "$2" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
}

rps() { # port args...
  local port=$1
  shift
  "$RB" -p "$port" -c 50 -n "$REQ" -P 1 --csv "$@" 2>/dev/null | tail -1 | awk -F'"' '{ print $4 }'
}

mid=$((MEM_N / 2))
for d in $DEPTHS; do
  declare -A R=()
  for s in redis tessera; do
    port=$(free_port)
    start "$s" "$port"
    pid=$PID
    $CLI -p "$port" CONFIG SET list-compress-depth "$d" >/dev/null
    u0=$(used "$port")
    r0=$(rss_kb "$pid")
    $CLI -p "$port" --pipe <"$OUT/load.resp" >/dev/null || die "$s load failed"
    u1=$(used "$port")
    r1=$(rss_kb "$pid")
    mu=$($CLI -p "$port" MEMORY USAGE big SAMPLES 0 | tr -d '\r')
    R[$s,usage]=$(awk -v a="$mu" -v n="$MEM_N" 'BEGIN { printf "%.2f", a / n }')
    R[$s,used]=$(awk -v a="$u0" -v b="$u1" -v n="$MEM_N" 'BEGIN { printf "%.2f", (b - a) / n }')
    R[$s,rss]=$(awk -v a="$r0" -v b="$r1" -v n="$MEM_N" 'BEGIN { printf "%.2f", (b - a) * 1024 / n }')
    R[$s,lrange_head]=$(rps "$port" LRANGE big 0 99)
    R[$s,lrange_mid]=$(rps "$port" LRANGE big "$mid" $((mid + 99)))
    R[$s,lindex_mid]=$(rps "$port" LINDEX big "$mid")
    R[$s,lpush]=$(rps "$port" LPUSH big 0123456789abcdef)
    R[$s,lpop]=$(rps "$port" LPOP big)
    kill "$pid"
    wait "$pid" 2>/dev/null
  done
  echo "== list-compress-depth $d: one list of $MEM_N x 28-byte elements; $REQ requests, 50 clients, pipeline 1"
  printf "%-16s %14s %14s %8s\n" metric redis tessera ratio
  for k in usage used rss; do
    printf "%-16s %14s %14s %8s\n" "bytes/elem ($k)" "${R[redis,$k]}" "${R[tessera,$k]}" \
      "$(awk -v a="${R[redis,$k]}" -v b="${R[tessera,$k]}" 'BEGIN { if (a > 0) printf "%.2f", b / a }')"
  done
  for k in lpush lpop lrange_head lrange_mid lindex_mid; do
    printf "%-16s %14s %14s %8s\n" "$k rps" "${R[redis,$k]}" "${R[tessera,$k]}" \
      "$(awk -v a="${R[redis,$k]}" -v b="${R[tessera,$k]}" 'BEGIN { if (a > 0) printf "%.2f", b / a }')"
  done
  unset R
done
