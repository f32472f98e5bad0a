#!/usr/bin/env bash
# bench/callgrind.sh - instructions per operation, server by server, under
# valgrind's callgrind: a figure that does not move with the machine's load
# (these VMs are shared; CPU time per op moves 5-30 % between runs).
#
# Usage:
#   bench/callgrind.sh NAME=CMD [NAME=CMD ...]
#
# CMD starts one server in the foreground on 127.0.0.1 port $PORT, as in
# ../shared/bench/compare.sh (quote it in single quotes); the script adds
# `--dir` with an empty directory of its own. It is run under
# `valgrind --tool=callgrind`; the counters are zeroed before each measured
# load (after a warm-up of the same load) and dumped after it, so start-up
# and warm-up are not counted (idle ticks during the load are). Each test's count is printed as
# instructions per request (all threads), and for the second and later
# servers as a ratio to the first.
#
# Tessera re-executes itself to tune malloc; valgrind does not follow that,
# so this script sets GLIBC_TUNABLES=glibc.malloc.tcache_count=256 itself
# (what the re-execution would set: the image then runs as in production).
#
# Environment (all optional):
#   CG_TESTS     space-separated test names (default: "set_p16 get_p16")
#   CG_REQUESTS  requests per measured run (default 200000)
#   CG_CLIENTS   connections (default 50)
#   CG_SETUP     redis-cli command run on each server before the tests, e.g.
#                "CONFIG SET notify-keyspace-events KEA" (default: none)
#   CG_REPLICA   1: each server gets a real redis-server replica (not under
#                valgrind) before the tests, linked and synced; the figures
#                are then the master's with one replica attached
#   OUT_DIR      where callgrind.out files and logs go (default: a temp dir)
#
# Tests: set_p1, set_p16, get_p1, get_p16 (keys from a 100k space; GET
# after the keys are loaded), mset10_p16, publish_p16 (no subscribers),
# pub<S>x<B> (S subscribers reading with bench/pubsub_subs.py, PUBLISH of
# B-byte payloads from 10 clients at pipeline 16; counted per delivered
# message, e.g. pub10x64, pub100x1024).
set -euo pipefail

[ $# -ge 1 ] || { sed -n 2,30p "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)"; exit 2; }
TESTS=${CG_TESTS:-"set_p16 get_p16"}
N=${CG_REQUESTS:-200000}
CLIENTS=${CG_CLIENTS:-50}
OUT=${OUT_DIR:-$(mktemp -d /tmp/callgrind-bench.XXXXXX)}
mkdir -p "$OUT"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

load() { # port test requests
  local p=$1 t=$2 n=$3
  # A server that dies under the load must not leave the script waiting.
  redis-benchmark() { timeout "${CG_LOAD_TIMEOUT:-900}" redis-benchmark "$@"; }
  case $t in
    set_p1) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 1 -r 100000 -t set ;;
    set_p16) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 16 -r 100000 -t set ;;
    get_p1) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 1 -r 100000 -t get ;;
    get_p16) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 16 -r 100000 -t get ;;
    mset10_p16) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 16 -r 100000 \
      mset k1:__rand_int__ v k2:__rand_int__ v k3:__rand_int__ v k4:__rand_int__ v \
      k5:__rand_int__ v k6:__rand_int__ v k7:__rand_int__ v k8:__rand_int__ v \
      k9:__rand_int__ v k10:__rand_int__ v ;;
    publish_p16) redis-benchmark -p "$p" -q -n "$n" -c "$CLIENTS" -P 16 publish chan hello ;;
    pub*x*) # pub<S>x<B>: S subscribers (bench/pubsub_subs.py), B-byte payloads
      local subs=${t#pub}; subs=${subs%x*}; local bytes=${t#*x}
      local fifo; fifo=$(mktemp -u /tmp/cg-subs.XXXXXX); mkfifo "$fifo"
      python3 "$(dirname "$0")/pubsub_subs.py" "$p" "$subs" bench "$bytes" "$n" 600 >"$fifo" &
      local spid=$! line
      exec 3<"$fifo"
      read -r line <&3   # ready
      redis-benchmark -p "$p" -q -n "$n" -c 10 -P 16 publish bench "$(head -c "$bytes" /dev/zero | tr '\0' x)"
      read -r line <&3   # messages N
      exec 3<&-
      wait "$spid" 2>/dev/null || true
      rm -f "$fifo" ;;
    *) echo "unknown test $t" >&2; exit 2 ;;
  esac >/dev/null 2>&1
}

# Requests in a test that one figure is "per": deliveries for pub<S>x<B>.
per_unit() { # test requests
  case $1 in
    pub*x*) local subs=${1#pub}; echo $(( ${subs%x*} * $2 )) ;;
    *) echo "$2" ;;
  esac
}

first=()
i=0
for spec in "$@"; do
  name=${spec%%=*}; cmd=${spec#*=}
  PORT=$(free_port); export PORT
  log="$OUT/$name.log"
  ( export GLIBC_TUNABLES=glibc.malloc.tcache_count=256
    # Its own empty directory: no dump.rdb or AOF of another run is loaded.
    mkdir -p "$OUT/$name.dir"
    eval "exec valgrind --tool=callgrind \
      --callgrind-out-file=\"$OUT/$name.%p.out\" $cmd --dir \"$OUT/$name.dir\"" ) >"$log" 2>&1 &
  vpid=$!
  up=0
  for _ in $(seq 600); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
  if [ $up -eq 0 ] || ! kill -0 "$vpid" 2>/dev/null; then
    echo "$name did not start (see $log)" >&2; exit 1
  fi
  [ -n "${CG_SETUP:-}" ] && redis-cli -p "$PORT" $CG_SETUP >/dev/null
  rport=""
  if [ "${CG_REPLICA:-0}" = 1 ]; then
    rport=$(free_port)
    mkdir -p "$OUT/$name.replica"
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$OUT/$name.replica" --replicaof 127.0.0.1 "$PORT" --repl-timeout 600 \
      >"$OUT/$name.replica.log" 2>&1 &
    linked=0
    for _ in $(seq 1200); do
      redis-cli -p "$rport" info replication 2>/dev/null | tr -d '\r' \
        | grep -q '^master_link_status:up' && { linked=1; break; }
      sleep 0.1
    done
    [ $linked = 1 ] || { echo "$name: the replica never linked (see $OUT/$name.replica.log)" >&2; exit 1; }
  fi
  redis-benchmark -p "$PORT" -q -n 100000 -c "$CLIENTS" -P 16 -r 100000 -t set >/dev/null 2>&1
  j=0
  for t in $TESTS; do
    load "$PORT" "$t" $((N / 4))          # warm-up, not counted
    callgrind_control -z "$vpid" >/dev/null 2>&1
    load "$PORT" "$t" "$N"
    callgrind_control --dump="$t" "$vpid" >/dev/null 2>&1
    ir=""
    for _ in $(seq 600); do
      f=$(ls -t "$OUT/$name".*.out.* 2>/dev/null | head -1 || true)
      [ -n "$f" ] && ir=$(grep -h '^summary:\|^totals:' "$f" | head -1 | awk '{print $2}')
      [ -n "$ir" ] && [ "$f" != "${last:-}" ] && break
      ir=""; sleep 0.2
    done
    last=$f
    [ -n "$ir" ] || { echo "no callgrind dump for $name $t" >&2; exit 1; }
    per=$(python3 -c "print(f'{$ir/$(per_unit "$t" "$N"):.0f}')")
    if [ $i -eq 0 ]; then
      first[$j]=$per; ratio=""
    else
      ratio=$(python3 -c "print(f'  ratio {$per/${first[$j]}:.3f}')")
    fi
    unit=request; case $t in pub*x*) unit=delivery ;; esac
    printf '%-12s %-12s %10s instructions/%s%s\n' "$name" "$t" "$per" "$unit" "$ratio"
    j=$((j + 1))
  done
  [ -n "$rport" ] && redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || kill "$vpid" 2>/dev/null || true
  wait "$vpid" 2>/dev/null || true
  i=$((i + 1))
done
echo "callgrind files and logs: $OUT"
