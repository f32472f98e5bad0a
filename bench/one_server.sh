#!/usr/bin/env bash
# bench/one_server.sh — one fresh server, one measured run, and what it did
# meanwhile: server CPU per op, context switches per op (voluntary and
# involuntary, every thread), optionally system calls per op by kind, the
# verbose log's consolidation moves, and INFO shard_threads_active.
# (Branch cores24: where t8u's extra CPU goes, and why t32c varies.)
#
#   bench/one_server.sh TAG BIN SHARDS CONSOLIDATION TEST PIPELINE N [server args...]
#
# BIN is a tessera binary, or `redis` for redis-server. TEST: set (SET of
# 64 bytes, redis-benchmark -t set), mset10 (MSET of 10 keys
# key:__rand_int__, 64-byte values, as bench/tx.sh), ping (-t ping_mbulk:
# no key, no hop). Steps: start the server (--loglevel verbose, the log in
# OUT/TAG.log), preload keys 0..99,999 as bench/tx.sh does, a warm-up of
# N/10 requests, 1.5 s idle, then N requests from 50 clients at PIPELINE
# with keys from 100,000. Prints one line:
#   cpu_us/op      utime+stime of the server over the run / N
#   cs/op          voluntary and involuntary switches, every thread
#   active         INFO shard_threads_active sampled every 20 ms (mean,
#                  samples above 1); SAMPLE=0: not sampled (each sample is
#                  a connection and an INFO)
#   moves          verbose log lines about consolidation in the run /
#                  shards given back / spreads that did not pay
#   threads>50ms   threads that used more than 50 ms of CPU in the run
#   load           the 1-minute load average at the end
#   with PERF=1, system calls per op by kind (perf stat on the syscalls
#   tracepoints, every server thread): all, epoll_wait (a loop's
#   iterations), write (eventfd doorbells: sockets use sendto), futex
#   (naps), recvfrom/sendto (sockets).
# Environment: PORT (default 23100), OUT (default /tmp/one_server).
# Counts hold on a shared machine; CPU figures do not: alternate the
# servers to compare, several rounds, with the load beside each.
set -u
TAG=$1 BIN=$2 S=$3 CONS=$4 TEST=$5 P=$6 N=$7
shift 7
D=${OUT:-/tmp/one_server}
mkdir -p "$D"
PORT=${PORT:-23100}
VAL=$(awk 'BEGIN { v = sprintf("%064d", 0); gsub(/0/, "v", v); print v }')
case $TEST in
  mset10) ARGS=(MSET); for _ in $(seq 10); do ARGS+=("key:__rand_int__" "$VAL"); done ;;
  set) ARGS=(-t set -d 64) ;;
  ping) ARGS=(-t ping_mbulk) ;;
  *) echo "TEST: set, mset10 or ping" >&2; exit 1 ;;
esac
LOG=$D/$TAG.log
rm -f "$LOG"
if [ "$BIN" = redis ]; then
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --logfile "$LOG" >/dev/null 2>&1 &
else
  "$BIN" --port "$PORT" --bind 127.0.0.1 --shards "$S" --shard-consolidation "$CONS" --save '' \
    --appendonly no --loglevel verbose --logfile "$LOG" "$@" >/dev/null 2>&1 &
fi
PID=$!
for _ in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
awk -v n=100000 'BEGIN { v = sprintf("%064d", 0); gsub(/0/, "x", v)
  for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$64\r\n%s\r\n", i, v }' |
  redis-cli -p "$PORT" --pipe >/dev/null 2>&1
redis-benchmark -p "$PORT" -c 50 -P "$P" -n $((N / 10)) -r 100000 -q "${ARGS[@]}" >/dev/null 2>&1
sleep 1.5
cpu() { awk '{print $14 + $15}' /proc/$PID/stat; }
cs() { cat /proc/$PID/task/*/status | awk '/^voluntary_ctxt/ {v += $2} /^nonvoluntary_ctxt/ {n += $2} END {print v, n}'; }
thr() { for t in /proc/$PID/task/*; do awk '{print $1, $14 + $15}' "$t"/stat; done; }
thr >"$D/$TAG.thr0"
L0=$(wc -l <"$LOG")
c0=$(cpu)
read -r v0 n0 < <(cs)
(
  [ "${SAMPLE:-1}" = 0 ] && { echo 1; exit; }
  while :; do
    [ "$BIN" = redis ] && echo 1 ||
      redis-cli -p "$PORT" info server 2>/dev/null | awk -F: '/^shard_threads_active/ {print $2 + 0}'
    sleep 0.02
  done
) >"$D/$TAG.act" &
SP=$!
PF=
if [ -n "${PERF:-}" ]; then
  EV=raw_syscalls:sys_enter
  for c in epoll_wait epoll_pwait write read recvfrom sendto futex; do EV+=",syscalls:sys_enter_$c"; done
  perf stat -x, -e "$EV" -p "$PID" -o "$D/$TAG.perf" &
  PF=$!
  sleep 0.2
fi
t0=$(date +%s.%N)
redis-benchmark -p "$PORT" -c 50 -P "$P" -n "$N" -r 100000 -q "${ARGS[@]}" >/dev/null 2>&1
t1=$(date +%s.%N)
c1=$(cpu)
read -r v1 n1 < <(cs)
if [ -n "$PF" ]; then kill -INT "$PF"; wait "$PF" 2>/dev/null; fi
kill "$SP" 2>/dev/null
wait "$SP" 2>/dev/null
thr >"$D/$TAG.thr1"
L1=$(wc -l <"$LOG")
kill "$PID"
wait "$PID" 2>/dev/null
sed -n "$((L0 + 1)),${L1}p" "$LOG" >"$D/$TAG.window" 2>/dev/null
moves=$(grep -ciE 'go back|goes back|folds|stuck|spread|rejoin|back on its own|did not pay|paid' "$D/$TAG.window")
moves="$moves/$(grep -c 'back on its own' "$D/$TAG.window")/$(grep -c 'did not pay' "$D/$TAG.window")"
act=$(awk '{s += $1; n++; if ($1 > 1) m++} END {printf "%.2f %d/%d", s / n, m, n}' "$D/$TAG.act")
busy=$(join <(sort "$D/$TAG.thr0") <(sort "$D/$TAG.thr1") | awk '{if ($3 - $2 > 5) k++} END {print k + 0}')
sc=
if [ -n "$PF" ]; then
  sc=$(awk -F, -v n="$N" '$3 ~ /sys_enter/ {sub(/.*sys_enter_?/, "", $3); if ($3 == "") $3 = "all"; printf "%s=%.3f ", $3, $1 / n}' "$D/$TAG.perf")
fi
awk -v tag="$TAG" -v c=$((c1 - c0)) -v n="$N" -v v=$((v1 - v0)) -v iv=$((n1 - n0)) \
  -v t="$(echo "$t1 - $t0" | bc)" -v act="$act" -v mv="$moves" -v bt="$busy" -v sc="$sc" \
  -v la="$(cut -d' ' -f1 /proc/loadavg)" \
  'BEGIN { printf "%-10s cpu_us/op %6.2f  cs/op vol %.3f inv %.3f  ops/s %7.0f  active mean,>1 %s  moves %s  threads>50ms %d  load %s  %s\n", tag, c * 1e4 / n, v / n, iv / n, n / t, act, mv, bt, la, sc }'
