#!/usr/bin/env bash
# bench/scripting_cg.sh - instructions per EVALSHA call under valgrind's
# callgrind, server by server (issue 23's targets; see bench/README.md).
#
#   bench/scripting_cg.sh NAME=CMD [NAME=CMD ...]
#   bench/scripting_cg.sh \
#     'redis=redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no' \
#     'tessera1=target/release/tessera --bind 127.0.0.1 --port $PORT --save "" --shards 1' \
#     'tessera=target/release/tessera --bind 127.0.0.1 --port $PORT --save ""'
#
# CMD starts one server in the foreground on port $PORT (single quotes;
# PORT_BASE=N puts them on N, N+1 ..., else any free port);
# the script adds `--dir` with an empty directory of its own and runs it
# under callgrind (Tessera: GLIBC_TUNABLES set here, as bench/callgrind.sh
# explains). Per test: a warm-up of 2000 calls, then 2000 and 8000 calls
# (redis-benchmark, 4 clients, pipeline CG_PIPELINE, default 1), the
# counters zeroed before and dumped after each; the figure is
# (I8000 - I2000) / 6000, so start-up, connections and fixed costs cancel
# out.
#
# Tests (CG_TESTS, default "one eight eighthot"):
#   one       EVALSHA of INCR KEYS[1] + EXPIRE KEYS[1] 100, keys k:0..99999
#   eight     EVALSHA of INCR of KEYS[1..8], keys a:N .. h:N from 100k each
#             (on Tessera's default layout the eight keys span shards;
#             mostly keys that do not exist yet)
#   eighthot  the same over 100 numbers per prefix (keys that exist)
#   every     EVALSHA of INCR KEYS[1] + DBSIZE, keys k:0..99 (not in
#             the default: with the shards apart DBSIZE makes the run
#             one over every shard, `commands::script::every`: its first
#             run is taken back and it runs again under every shard's
#             locks, its calls on other threads' shards posted there)
#   stray     EVALSHA of INCR of KEYS[1], ARGV[1], ARGV[2] (the last two
#             keys it did not declare: bench/scripting.sh's stray test),
#             keys u:N from 100k; `decl` the same with all three declared
#             (not in the default: what undeclared keys cost per call)
#   publish   EVALSHA of INCR KEYS[1] + PUBLISH to a channel nobody
#             listens to, keys k:0..99999 (not in the default: with
#             several shards a PUBLISH makes a run one that cannot be
#             taken back, so its calls from another co-hosted loop hop)
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,35p "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed"; exit 2; }
TESTS=${CG_TESTS:-"one eight eighthot"}
PIPELINE=${CG_PIPELINE:-1}
OUT=${OUT_DIR:-$(mktemp -d /tmp/scripting-cg.XXXXXX)}
ONE="redis.call('INCR', KEYS[1]); redis.call('EXPIRE', KEYS[1], 100); return 1"
EIGHT="for i = 1, #KEYS do redis.call('INCR', KEYS[i]) end; return #KEYS"
PUBLISH="redis.call('INCR', KEYS[1]); redis.call('PUBLISH', 'cg', 'm'); return 1"
EVERY="redis.call('INCR', KEYS[1]); return redis.call('DBSIZE')"
STRAY="redis.call('INCR', KEYS[1]); redis.call('INCR', ARGV[1]); redis.call('INCR', ARGV[2]); return 1"
DECL="redis.call('INCR', KEYS[1]); redis.call('INCR', KEYS[2]); redis.call('INCR', KEYS[3]); return 1"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

n=0
for spec in "$@"; do
  name=${spec%%=*}; cmd=${spec#*=}
  # PORT_BASE: the servers on PORT_BASE, PORT_BASE+1 ... (a range of
  # one's own on a shared machine); else any free port.
  if [ -n "${PORT_BASE:-}" ]; then PORT=$((PORT_BASE + n)); else PORT=$(free_port); fi
  n=$((n + 1)); export PORT
  mkdir -p "$OUT/$name.dir"
  ( export GLIBC_TUNABLES=glibc.malloc.tcache_count=256
    eval "exec valgrind --tool=callgrind \
      --callgrind-out-file=\"$OUT/$name.%p.out\" $cmd --dir \"$OUT/$name.dir\"" ) >"$OUT/$name.log" 2>&1 &
  vpid=$!
  up=0
  for _ in $(seq 600); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
  [ $up -eq 1 ] || { echo "$name did not start (see $OUT/$name.log)" >&2; kill "$vpid" 2>/dev/null; exit 1; }
  last=""
  # Dumps the counters; prints the new dump's instruction total.
  dump() {
    callgrind_control --dump="$1" "$vpid" >/dev/null 2>&1
    local f ir
    for _ in $(seq 600); do
      f=$(ls -t "$OUT/$name".*.out.* 2>/dev/null | head -1 || true)
      if [ -n "$f" ] && [ "$f" != "$last" ]; then
        ir=$(grep -h '^summary:\|^totals:' "$f" | head -1 | awk '{print $2}')
        [ -n "$ir" ] && { echo "$f $ir"; return; }
      fi
      sleep 0.2
    done
    echo "no callgrind dump for $name" >&2; exit 1
  }
  for t in $TESTS; do
    case $t in
      one) body=$ONE; keys=(1 k:__rand_int__); r=100000 ;;
      publish) body=$PUBLISH; keys=(1 k:__rand_int__); r=100000 ;;
      every) body=$EVERY; keys=(1 k:__rand_int__); r=100 ;;
      stray) body=$STRAY; keys=(1 u:__rand_int__ u:__rand_int__ u:__rand_int__); r=100000 ;;
      decl) body=$DECL; keys=(3 u:__rand_int__ u:__rand_int__ u:__rand_int__); r=100000 ;;
      eight|eighthot)
        body=$EIGHT; r=100000; [ "$t" = eighthot ] && r=100
        keys=(8 a:__rand_int__ b:__rand_int__ c:__rand_int__ d:__rand_int__
              e:__rand_int__ f:__rand_int__ g:__rand_int__ h:__rand_int__) ;;
      *) echo "unknown test $t" >&2; exit 2 ;;
    esac
    sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$body")
    load() { timeout 900 redis-benchmark -p "$PORT" -c 4 -P "$PIPELINE" -n "$1" -r "$r" -q EVALSHA "$sha" "${keys[@]}" >/dev/null; }
    load 2000
    callgrind_control -z "$vpid" >/dev/null 2>&1
    load 2000
    read -r last a < <(dump "${t}_2k")
    callgrind_control -z "$vpid" >/dev/null 2>&1
    load 8000
    read -r last b < <(dump "${t}_8k")
    printf '%-10s %-9s %8.0f instructions/call\n' "$name" "$t" "$(python3 -c "print(($b - $a) / 6000)")"
  done
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || kill "$vpid" 2>/dev/null || true
  wait "$vpid" 2>/dev/null || true
done
echo "callgrind files and logs: $OUT"
