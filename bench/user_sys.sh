#!/usr/bin/env bash
# bench/user_sys.sh — one fresh server, one measured redis-benchmark run:
# the server's user and system CPU per op apart, its context switches per
# op (every thread), and ops/s. (Session 24: t8u's excess is user time too;
# the 8-key script apart and the undeclared-key script in wall CPU.)
#
#   bench/user_sys.sh "SERVER COMMAND with \$PORT" N PIPELINE BENCH-ARGS...
#
#   bench/user_sys.sh "redis-server --port \$PORT --save ''" 300000 1 -t set -d 64
#   SETUP='SHA=$(redis-cli -p $PORT SCRIPT LOAD "return redis.call(\"INCR\", KEYS[1])")' \
#     bench/user_sys.sh "target/release/tessera --port \$PORT --save ''" 100000 1 EVALSHA SHA 1 k:__rand_int__
#
# SETUP, if set, is evaluated once the server answers (PORT set); a
# benchmark argument `SHA` is replaced by the value of $SHA it left. A
# warm-up of N/4 requests precedes the measured N (50 clients, keys from
# 100,000). Prints: user µs/op, system µs/op, their total, cs/op, ops/s.
# One run is one sample on a shared machine: alternate the servers and
# repeat, with the load beside each figure. Signals only the server it
# started.
set -u
[ $# -ge 4 ] || { sed -n 2,20p "$0"; exit 2; }
cmd=$1 n=$2 p=$3
shift 3
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
bash -c "exec ${cmd//\$PORT/$PORT}" >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null' EXIT
for _ in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
SHA=
if [ -n "${SETUP:-}" ]; then eval "$SETUP"; fi
ARGS=("$@")
for i in "${!ARGS[@]}"; do [ "${ARGS[$i]}" = SHA ] && ARGS[i]=$SHA; done
bench() { redis-benchmark -p "$PORT" -c 50 -P "$p" -n "$1" -r 100000 -q "${ARGS[@]}" >/dev/null 2>&1; }
ticks() { awk '{print $14, $15}' "/proc/$PID/stat"; }
switches() { cat /proc/"$PID"/task/*/status | awk '/ctxt_switches/ { s += $2 } END { print s }'; }
bench $((n / 4))
read -r u0 s0 < <(ticks); cs0=$(switches); t0=$(date +%s.%N)
bench "$n"
t1=$(date +%s.%N); read -r u1 s1 < <(ticks); cs1=$(switches)
awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$(getconf CLK_TCK)" -v n="$n" -v cs=$((cs1 - cs0)) \
  -v t="$(echo "$t1 - $t0" | bc)" 'BEGIN {
    printf "user %.2f sys %.2f total %.2f us/op  cs/op %.2f  ops/s %.0f\n",
      u * 1e6 / hz / n, s * 1e6 / hz / n, (u + s) * 1e6 / hz / n, cs / n, n / t }'
