#!/usr/bin/env bash
# bench/pubsub.sh — PUBLISH fan-out (issue 22): Tessera next to Redis 7 in
# one run, as ratios of server CPU per delivered message.
#
#   bench/pubsub.sh
#
# For S subscribers (1, 10, 100; spread over Tessera's threads by the
# kernel's SO_REUSEPORT) and payloads of 64 B and 1 KB: S connections
# SUBSCRIBE to one channel (bench/pubsub_subs.py reads and counts what they
# get), then redis-benchmark sends N PUBLISHes from 10 clients at pipeline
# 16. Reported: server CPU (utime+stime from /proc) per delivered message
# in microseconds, publishes per second, and the ratio to Redis.
#
# Env: BENCH_PUBSUB_DELIVERIES (default 2000000: N = this / S),
#      BENCH_ROUNDS (default 2), TESSERA_BENCH_BIN, BENCH_SKIP_BUILD=1.
# Measurements, never pass/fail: on 2 cores the load generators compete
# with the server; compare CPU per message, not throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BENCH_BIN:-target/release/tessera}
if [ -z "${TESSERA_BENCH_BIN:-}" ] && [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q
fi
DELIVERIES=${BENCH_PUBSUB_DELIVERIES:-2000000}
ROUNDS=${BENCH_ROUNDS:-2}
PY=${PYTHON:-python3}
HZ=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_one() { # name cmd subs payload -> prints "us_per_msg pub_per_s"
  local name=$1 cmd=$2 subs=$3 payload=$4
  local port; port=$(free_port)
  local c=${cmd//\$PORT/$port}
  bash -c "exec $c" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  local n=$(( DELIVERIES / subs ))
  local fifo; fifo=$(mktemp -u); mkfifo "$fifo"
  $PY bench/pubsub_subs.py "$port" "$subs" bench "$payload" "$n" 120 >"$fifo" &
  local subpid=$!
  exec 3<"$fifo"
  read -r _ <&3   # ready
  local t0 c0; t0=$(date +%s.%N); c0=$(cpu_ticks "$pid")
  redis-benchmark -p "$port" -c 10 -P 16 -n "$n" -q \
    PUBLISH bench "$(head -c "$payload" /dev/zero | tr '\0' x)" >/dev/null
  local got; read -r _ got <&3
  local t1 c1; t1=$(date +%s.%N); c1=$(cpu_ticks "$pid")
  exec 3<&-; rm -f "$fifo"
  wait "$subpid" 2>/dev/null || true
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  awk -v c=$((c1 - c0)) -v hz="$HZ" -v got="$got" -v n="$n" -v t="$(echo "$t1 - $t0" | bc)" \
    'BEGIN { printf "%.3f %.0f %d\n", (c / hz) * 1e6 / (got > 0 ? got : 1), n / t, got }'
}

SERVERS=(
  "redis=redis-server --bind 127.0.0.1 --port \$PORT --save '' --appendonly no"
  "tessera=$BIN --bind 127.0.0.1 --port \$PORT --save ''"
)
printf '| subs | payload | server | CPU us/msg | publishes/s | delivered | CPU ratio |\n|---|---|---|---|---|---|---|\n'
for subs in 1 10 100; do
  for payload in 64 1024; do
    declare -A best=()
    for _ in $(seq "$ROUNDS"); do
      for s in "${SERVERS[@]}"; do
        name=${s%%=*}; cmd=${s#*=}
        read -r us rate got < <(run_one "$name" "$cmd" "$subs" "$payload")
        if [ -z "${best[$name]:-}" ] || awk -v a="$us" -v b="${best[$name]%% *}" 'BEGIN{exit !(a<b)}'; then
          best[$name]="$us $rate $got"
        fi
      done
    done
    base=${best[redis]%% *}
    for s in "${SERVERS[@]}"; do
      name=${s%%=*}; read -r us rate got <<<"${best[$name]}"
      ratio=$(awk -v a="$us" -v b="$base" 'BEGIN{printf "%.2f", a/b}')
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$subs" "$payload" "$name" "$us" "$rate" "$got" "$ratio"
    done
    unset best
  done
done
