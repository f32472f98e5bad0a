#!/usr/bin/env bash
# bench/spread_trial.sh — server CPU per op and context switches at one
# pipeline depth, Redis next to one or more Tessera binaries in one run
# (issue 24's last point: shard consolidation spreading only when it pays).
#
#   bench/spread_trial.sh ROUNDS REQUESTS TEST PIPELINE name=/path/to/tessera...
#   e.g. bench/spread_trial.sh 7 200000 setbit 1 main=/tmp/t-main new=target/release/tessera
#
# TEST: setbit, pfadd or set, as bench/types24.sh runs them (redis-benchmark,
# 50 clients, -r 1000), or mset10 (MSET of 10 keys key:__rand_int__, 64-byte
# values, -r 100000, as bench/tx.sh), or evalsha1 (bench/scripting.sh's
# one-key script). Every server starts once (Tessera with --loglevel
# verbose); per round each runs the test once, the order reversed every
# other round, after a FLUSHALL and 1.5 s of idle. Printed per run (CSV):
# test, pipeline, server, round, server CPU us/op (utime+stime of every
# thread, /proc/PID/stat), ops/s, context switches per 100k ops (voluntary +
# involuntary over the server's threads, /proc/PID/task/*/status: what
# `perf stat -e context-switches -p PID` counts), and the CPU the rest of
# the machine used (cores). Then per Tessera binary, from its log: shards
# given back (bursts and stuck rounds), spreads that paid, that did not
# pay, backoffs ended by a load change; with SAMPLE=1, also INFO's
# shard_threads_active sampled every 0.1 s during each run (mean, max: the
# threads running a loop), printed as two more CSV columns.
# Env: OUT (./bench-results/spread-<time>), PORTBASE (7431), SHARDS (Tessera's
# --shards; default one per CPU), SAMPLE (0). Measurements,
# never pass/fail; on 2 vCPUs shared with other work they are noisy: take
# medians over rounds. Only PIDs started here are signalled.
set -uo pipefail
[ $# -ge 5 ] || { sed -n 2,27p "$0"; exit 2; }
ROUNDS=$1; N=$2; T=$3; P=$4; shift 4
OUT=${OUT:-./bench-results/spread-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || exit 1
HZ=$(getconf CLK_TCK)
declare -A PID PORT BIN
NAMES=(redis)
for a in "$@"; do NAMES+=("${a%%=*}"); BIN[${a%%=*}]=${a#*=}; done
port=${PORTBASE:-7431}
for s in "${NAMES[@]}"; do
  port=$((port + 1))
  if [ "$s" = redis ]; then
    redis-server --bind 127.0.0.1 --port $port --save '' --appendonly no >"$OUT/$s.log" 2>&1 &
  else
    "${BIN[$s]}" --bind 127.0.0.1 --port $port --save '' --loglevel verbose ${SHARDS:+--shards $SHARDS} >"$OUT/$s.log" 2>&1 &
  fi
  PID[$s]=$!; PORT[$s]=$port
done
cleanup() { local s; for s in "${NAMES[@]}"; do kill "${PID[$s]}" 2>/dev/null; wait "${PID[$s]}" 2>/dev/null; done; }
trap cleanup EXIT
sleep 1
case $T in
  setbit) ARGS=(-r 1000 SETBIT "bm:__rand_int__" 77777 1) ;;
  pfadd) ARGS=(-r 1000 PFADD "hll:__rand_int__" "e:__rand_int__:__rand_int__") ;;
  set) ARGS=(-r 1000 SET "k:__rand_int__" v) ;;
  evalsha1)
    # bench/scripting.sh's one-key script, loaded on every server.
    body="redis.call('INCR', KEYS[1]); redis.call('EXPIRE', KEYS[1], 100); return 1"
    for s in "${NAMES[@]}"; do sha=$(timeout 10 redis-cli -p "${PORT[$s]}" SCRIPT LOAD "$body"); done
    ARGS=(-r 100000 EVALSHA "$sha" 1 "k:__rand_int__") ;;
  mset10)
    VAL=$(printf 'v%.0s' $(seq 64))
    ARGS=(-r 100000 MSET)
    for i in $(seq 10); do ARGS+=("key:__rand_int__" "$VAL"); done ;;
  *) echo "unknown test $T" >&2; exit 2 ;;
esac
cs() { local t=0 f; for f in /proc/$1/task/*/status; do t=$((t + $(awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' "$f" 2>/dev/null || echo 0))); done; echo $t; }
ticks() { local s; s=$(cat "/proc/$1/stat") || { echo 0; return; }; s=${s##*) }; set -- $s; echo $((${12} + ${13})); }
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
SAMPLE=${SAMPLE:-0}
# sampler PORT FILE: INFO's shard_threads_active every 0.1 s into FILE, until killed.
sampler() {
  while :; do
    redis-cli -p "$1" INFO server 2>/dev/null | awk -F: '/^shard_threads_active:/ { print $2 + 0 }' >>"$2"
    sleep 0.1
  done
}
head="test,pipeline,server,round,cpu_us_per_op,ops_per_s,cs_per_100k,rest_cores"
[ "$SAMPLE" = 1 ] && head="$head,threads_mean,threads_max"
echo "$head"
for r in $(seq "$ROUNDS"); do
  order=("${NAMES[@]}")
  [ $((r % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${NAMES[@]}" | tac)
  for s in "${order[@]}"; do
    pid=${PID[$s]}
    timeout 60 redis-cli -p "${PORT[$s]}" FLUSHALL >/dev/null
    sleep 1.5
    sp=""; samples="$OUT/threads-$s-$r"; : >"$samples"
    if [ "$SAMPLE" = 1 ] && [ "$s" != redis ]; then sampler "${PORT[$s]}" "$samples" & sp=$!; fi
    c0=$(ticks "$pid"); x0=$(cs "$pid"); m0=$(busy); t0=$(date +%s%N)
    rps=$(timeout 600 redis-benchmark -p "${PORT[$s]}" -c 50 -n "$N" -P "$P" --csv "${ARGS[@]}" 2>&1 | awk -F'"' 'NR == 2 { print $4 }')
    t1=$(date +%s%N); c1=$(ticks "$pid"); x1=$(cs "$pid"); m1=$(busy)
    [ -n "$sp" ] && { kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null; }
    th=""
    [ "$SAMPLE" = 1 ] && th=$(awk '{ s += $1; if ($1 > m) m = $1; n++ } END { if (n) printf ",%.2f,%d", s / n, m; else printf ",NA,NA" }' "$samples")
    awk -v s="$s" -v r="$r" -v c=$((c1 - c0)) -v x=$((x1 - x0)) -v n="$N" -v hz="$HZ" -v rps="${rps:-0}" \
      -v w=$((t1 - t0)) -v m=$((m1 - m0)) -v t="$T" -v p="$P" -v th="$th" 'BEGIN { srv = c / hz
      printf "%s,p%s,%s,%d,%.3f,%.0f,%.0f,%.2f%s\n", t, p, s, r, srv * 1e6 / n, rps, x * 100000 / n, (m / hz - srv) / (w / 1e9), th }'
  done
done
for s in "${NAMES[@]}"; do
  [ "$s" = redis ] && continue
  l=$OUT/$s.log
  echo "# $s: shards given back $(grep -c 'back on its own thread' "$l") (by the watchdog $(grep -c 'has been in one round for' "$l"); stuck rounds $(grep -c 'was in one round for' "$l"), bursts $(grep -c 'of its shards go back' "$l")), paid $(grep -c 'spreading paid' "$l"), did not pay $(grep -c 'did not pay' "$l"), load changed $(grep -c 'load changed' "$l")"
done
