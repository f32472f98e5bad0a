#!/usr/bin/env bash
# bench/hub_syscalls.sh — what a hub's work costs the kernel as the number
# of loops it holds grows (issue 27): per operation, system calls by kind,
# context switches and server CPU, for SET and MSET of 10 keys at pipelines
# 1 and 16, with 2 and 32 shards (or SHARDS given).
#
#   bench/hub_syscalls.sh BIN [SHARDS...]        (default shards: 2 32)
#
# BIN is meant to be a build with every shard held on one hub (the
# constants `bench/mset_callgrind.sh`'s header gives, never committed): the
# script waits until INFO's shard_threads_active is 1 and says so if it
# never gets there. Per shard count, one server; per test, an unmeasured
# warm-up run and one measured run of BENCH_N requests (default 100,000),
# 50 clients (BENCH_CLIENTS), keys from a space of 100,000. Counts, not
# times: system calls from `perf stat` on the syscalls tracepoints (every
# server thread), context switches from /proc/PID/task/*/status
# (voluntary + involuntary), so they hold on a shared, noisy machine; the
# CPU per op (utime + stime of the process) is shown too, and is not.
#
# Environment: BENCH_N, BENCH_CLIENTS, BENCH_PORT (default 7393),
# BENCH_TESTS (default "set_p1 set_p16 mset10_p1 mset10_p16"),
# HUB_SC_DIR (raw perf output, default a temporary directory).
set -euo pipefail

BIN=${1:?usage: $0 BIN [SHARDS...]}
shift
if [ $# -gt 0 ]; then SHARDS=("$@"); else SHARDS=(2 32); fi
N=${BENCH_N:-100000}
CLIENTS=${BENCH_CLIENTS:-50}
PORT=${BENCH_PORT:-7393}
TESTS=${BENCH_TESTS:-"set_p1 set_p16 mset10_p1 mset10_p16"}
DIR=${HUB_SC_DIR:-$(mktemp -d /tmp/hub_sc.XXXXXX)}
mkdir -p "$DIR"

command -v perf >/dev/null || { echo "perf not found" >&2; exit 1; }

# The calls a loop makes; anything else shows in "other" (all entries
# minus these).
CALLS="epoll_wait epoll_pwait epoll_ctl read write readv writev recvfrom sendto
  recvmsg sendmsg futex clock_gettime sched_yield nanosleep clock_nanosleep
  accept4 close mmap munmap madvise brk"
EVENTS=raw_syscalls:sys_enter
for c in $CALLS; do EVENTS+=",syscalls:sys_enter_$c"; done

VAL=$(printf 'v%.0s' $(seq 1 64))
args_of() {
  local t=$1 p=${1##*_p}
  ARGS=(-P "$p" -r 100000)
  case "${t%_p*}" in
    set) ARGS+=(-t set -d 64) ;;
    mset10)
      ARGS+=(MSET)
      for _ in $(seq 1 10); do ARGS+=("key:__rand_int__" "$VAL"); done
      ;;
  esac
}

cs_of() {
  local pid=$1 total=0 v
  for f in /proc/"$pid"/task/*/status; do
    v=$(awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }' "$f" 2>/dev/null || echo 0)
    total=$((total + v))
  done
  echo "$total"
}

# utime and stime of the process, in clock ticks.
cpu_of() { awk '{ print $14, $15 }' /proc/"$1"/stat; }

printf '%-6s %-11s %8s %8s %8s %8s' shards test usr_us/op sys_us/op cs/op calls/op
for c in $CALLS; do printf ' %s' "$c"; done
printf ' other\n'

for s in "${SHARDS[@]}"; do
  log="$DIR/log.s$s"
  "$BIN" --port "$PORT" --bind 127.0.0.1 --shards "$s" --save '' --appendonly no \
    >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  active=
  for _ in $(seq 1 150); do
    active=$(redis-cli -p "$PORT" info server 2>/dev/null | tr -d '\r' |
      awk -F: '/^shard_threads_active:/ { print $2 }')
    [ "$active" = 1 ] && break
    sleep 0.2
  done
  [ "$active" = 1 ] || echo "# shards=$s: shard_threads_active=$active (not one hub)"
  tick=$(getconf CLK_TCK)
  for t in $TESTS; do
    args_of "$t"
    redis-benchmark -p "$PORT" -c "$CLIENTS" -n 20000 -q "${ARGS[@]}" >/dev/null 2>&1
    out="$DIR/perf.s$s.$t"
    cs0=$(cs_of "$pid")
    read -r u0 k0 < <(cpu_of "$pid")
    perf stat -x, -o "$out" -e "$EVENTS" -p "$pid" -- \
      redis-benchmark -p "$PORT" -c "$CLIENTS" -n "$N" -q "${ARGS[@]}" >/dev/null 2>&1
    cs1=$(cs_of "$pid")
    read -r u1 k1 < <(cpu_of "$pid")
    awk -F, -v s="$s" -v t="$t" -v n="$N" -v cs=$((cs1 - cs0)) \
      -v usr=$((u1 - u0)) -v sys=$((k1 - k0)) -v tick="$tick" -v calls="$CALLS" '
      $3 ~ /sys_enter/ { v[$3] = $1 }
      END {
        total = v["raw_syscalls:sys_enter"]
        printf "%-6s %-11s %8.2f %8.2f %8.3f %8.3f", s, t, usr * 1e6 / tick / n, sys * 1e6 / tick / n, cs / n, total / n
        k = split(calls, c, " ")
        rest = total
        for (i = 1; i <= k; i++) {
          x = v["syscalls:sys_enter_" c[i]] + 0
          rest -= x
          printf " %.3f", x / n
        }
        printf " %.3f\n", rest / n
      }' "$out"
  done
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
done
echo "# raw perf output in $DIR"
