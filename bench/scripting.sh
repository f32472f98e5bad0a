#!/usr/bin/env bash
# bench/scripting.sh — Lua scripts (issue 23): Tessera next to Redis 7 in
# one run, as ratios of server CPU per call.
#
#   bench/scripting.sh
#
# Tests (50 clients, redis-benchmark; every __rand_int__ occurrence gets its
# own random number, so the 8 keys of one call spread over the shards):
#
#   evalsha1   EVALSHA of a one-key script: INCR KEYS[1]; EXPIRE KEYS[1] 100
#              (pipeline 1 and 16)
#   evalsha8   EVALSHA of an 8-key script: INCR of each of KEYS[1..8]
#              (cross-shard on Tessera; pipeline 1)
#   rss        the server's RSS (VmRSS) after a warm-up of BENCH_RSS_WARM
#              (default one million) EVALSHA calls of evalsha1's script
#              over 1000 keys (all made by the warm-up), then after each of
#              BENCH_RSS_STEPS (default 2) further runs of BENCH_RSS_CALLS
#              (default one million): growth after the warm-up must stay
#              within Redis's own (issue 23). The warm-up fills what is
#              meant to fill once (allocator caches, pooled buffers, the
#              connections' buffers); bench/README.md has what grew before
#              it was fixed and how to look (bench/malloc_gdb.py). With
#              BENCH_RSS_PURGE=1 each reading follows a MEMORY PURGE
#              (glibc: malloc_trim(0)), so free memory the allocator keeps
#              resident drops out and what remains is held (live data, the
#              threads' tcaches, pools).
#   stray      GET/SET throughput of 50 clients (redis-benchmark -t get,set,
#              keys "key:*") alone, then while 10 other clients run a script
#              that declares one key and touches two undeclared keys of other
#              shards (`EVALSHA sha 1 u:A u:B u:C`, commands::script::wide),
#              then while they run the same work with every key declared
#              (`EVALSHA sha 3 u:A u:B u:C`): the share of the lone
#              throughput kept in each case. The declared run is the control
#              (the same CPU load without undeclared keys): on 2 cores any
#              concurrent load takes CPU from GET/SET, so the figure that
#              isolates the cost of undeclared keys is stray / declared.
#              Beside each, the scripts' own calls/s over the same window
#              (INFO commandstats): a server that runs more of them gives
#              GET/SET less of the 2 cores it shares with the clients.
#              With BENCH_PIN=1 (taskset) every server runs on CPU 0 and
#              the clients on CPU 1: the figure is then how a server shares
#              one core between GET/SET and the scripts, as Redis's one
#              thread does, apart from the clients' CPU.
#
# Reported: server CPU (utime+stime from /proc, all threads) per call in
# microseconds, calls per second, and Tessera / Redis. Measurements, never
# pass/fail: the machine is shared; for a close ratio use callgrind
# instruction counts (see bench/README.md).
#
# Env: BENCH_REQUESTS (default 200000 per measured run), BENCH_ROUNDS
#      (default 2), BENCH_RSS_WARM, BENCH_RSS_CALLS (default 1000000 each),
#      BENCH_RSS_STEPS (default 2), BENCH_TESTS (subset of
#      "evalsha1 evalsha8 rss stray"), TESSERA_BENCH_BIN, BENCH_SKIP_BUILD=1,
#      BENCH_APART=1 (a third server, `apart`: Tessera with
#      --shard-consolidation no, each shard's loop on its own thread; its
#      rows follow the default layout's, as "apart").
# The script only signals PIDs it started itself.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BENCH_BIN:-target/release/tessera}
if [ -z "${TESSERA_BENCH_BIN:-}" ] && [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q
fi
N=${BENCH_REQUESTS:-200000}
ROUNDS=${BENCH_ROUNDS:-2}
RSS_WARM=${BENCH_RSS_WARM:-1000000}
RSS_CALLS=${BENCH_RSS_CALLS:-1000000}
RSS_STEPS=${BENCH_RSS_STEPS:-2}
RSS_PURGE=${BENCH_RSS_PURGE:-0}
TESTS=${BENCH_TESTS:-evalsha1 evalsha8 rss stray}
PY=${PYTHON:-python3}
HZ=$(getconf CLK_TCK)
KEYSPACE=100000

ONE="redis.call('INCR', KEYS[1]); redis.call('EXPIRE', KEYS[1], 100); return 1"
EIGHT="for i = 1, #KEYS do redis.call('INCR', KEYS[i]) end; return #KEYS"
# Declares KEYS[1]; ARGV[1..2] are keys it did not declare.
STRAY="redis.call('INCR', KEYS[1]); redis.call('INCR', ARGV[1]); redis.call('INCR', ARGV[2]); return 1"
# The same work with every key declared.
DECL="redis.call('INCR', KEYS[1]); redis.call('INCR', KEYS[2]); redis.call('INCR', KEYS[3]); return 1"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# RSS for the rss test: after a MEMORY PURGE with BENCH_RSS_PURGE=1.
rss_reading() {
  if [ "$RSS_PURGE" = 1 ]; then redis-cli -p "$PORT" MEMORY PURGE >/dev/null; fi
  rss_kb "$PID"
}
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

SERVERS=(
  "redis=redis-server --bind 127.0.0.1 --port \$PORT --save '' --appendonly no"
  "tessera=$BIN --bind 127.0.0.1 --port \$PORT --save ''"
)
if [ "${BENCH_APART:-0}" = 1 ]; then
  SERVERS+=("apart=$BIN --bind 127.0.0.1 --port \$PORT --save '' --shard-consolidation no")
fi
# BENCH_PIN=1: each server on CPU 0, the stray test's clients on CPU 1.
SERVER_CPU="" CLIENT_CPU=""
if [ "${BENCH_PIN:-0}" = 1 ]; then SERVER_CPU="taskset -c 0" CLIENT_CPU="taskset -c 1"; fi
TESSERAS=$(for s in "${SERVERS[@]}"; do n=${s%%=*}; [ "$n" != redis ] && echo "$n"; done)

PID=""
PORT=""
start() { # cmd
  PORT=$(free_port)
  local c=${1//\$PORT/$PORT}
  $SERVER_CPU bash -c "exec $c" >/dev/null 2>&1 &
  PID=$!
  for _ in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "scripting.sh: server did not start: $c" >&2; exit 1
}
stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
load() { redis-cli -p "$PORT" SCRIPT LOAD "$1"; }

# measure LABEL PIPELINE ARGS... -> "us_per_call calls_per_s"
measure() {
  local p=$1; shift
  local c0 t0 c1 t1
  c0=$(cpu_ticks "$PID"); t0=$(now)
  redis-benchmark -p "$PORT" -c 50 -P "$p" -n "$N" -r "$KEYSPACE" -q "$@" >/dev/null
  c1=$(cpu_ticks "$PID"); t1=$(now)
  awk -v c=$((c1 - c0)) -v hz="$HZ" -v n="$N" -v t="$(echo "$t1 - $t0" | bc)" \
    'BEGIN { printf "%.3f %.0f\n", (c / hz) * 1e6 / n, n / t }'
}

# GET/SET ops/s of 50 clients on keys key:*, from redis-benchmark's CSV.
getset_rate() {
  $CLIENT_CPU redis-benchmark -p "$PORT" -c 50 -n "$N" -r "$KEYSPACE" -t set,get --csv 2>/dev/null \
    | tr -d '"' | awk -F, '$1 ~ /^(SET|GET)$/ { s += $2; n++ } END { printf "%.0f\n", s / n }'
}

# EVALSHA calls so far (INFO commandstats).
evalsha_calls() {
  redis-cli -p "$PORT" INFO commandstats | tr -d '\r' \
    | awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2; f = 1 } END { if (!f) print 0 }'
}

# stray_rate SHA NUMKEYS -> "GET/SET ops/s, script calls/s" while 10
# clients run the script (the calls/s over the same window)
stray_rate() {
  local sha=$1 nk=$2
  $CLIENT_CPU redis-benchmark -p "$PORT" -c 10 -n 100000000 -r "$KEYSPACE" -q \
    EVALSHA "$sha" "$nk" u:__rand_int__ u:__rand_int__ u:__rand_int__ >/dev/null 2>&1 &
  local bg=$!
  sleep 1
  local e0 t0 rate e1 t1
  e0=$(evalsha_calls); t0=$(now)
  rate=$(getset_rate)
  e1=$(evalsha_calls); t1=$(now)
  kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true
  awk -v r="$rate" -v e="$((e1 - e0))" -v t="$(echo "$t1 - $t0" | bc)" 'BEGIN { printf "%d %.0f\n", r, e / t }'
}

declare -A RES
for round in $(seq "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    name=${s%%=*}; cmd=${s#*=}
    for t in $TESTS; do
      start "$cmd"
      case $t in
        evalsha1)
          sha=$(load "$ONE")
          for p in 1 16; do
            RES[$name,evalsha1_p$p,$round]=$(measure "$p" EVALSHA "$sha" 1 k:__rand_int__)
          done ;;
        evalsha8)
          sha=$(load "$EIGHT")
          RES[$name,evalsha8_p1,$round]=$(measure 1 EVALSHA "$sha" 8 \
            a:__rand_int__ b:__rand_int__ c:__rand_int__ d:__rand_int__ \
            e:__rand_int__ f:__rand_int__ g:__rand_int__ h:__rand_int__) ;;
        rss)
          sha=$(load "$ONE")
          # 1000 keys, all made by the warm-up: growth after it is the
          # scripts' own, not the keyspace's. Nothing but EVALSHA between
          # readings (an INFO would allocate too).
          redis-benchmark -p "$PORT" -c 50 -P 16 -n "$RSS_WARM" -r 1000 -q EVALSHA "$sha" 1 k:__rand_int__ >/dev/null
          readings=$(rss_reading)
          for _ in $(seq "$RSS_STEPS"); do
            redis-benchmark -p "$PORT" -c 50 -P 16 -n "$RSS_CALLS" -r 1000 -q EVALSHA "$sha" 1 k:__rand_int__ >/dev/null
            readings="$readings $(rss_reading)"
          done
          RES[$name,rss,$round]=$readings ;;
        stray)
          stray=$(load "$STRAY"); decl=$(load "$DECL")
          alone=$(getset_rate)
          with_stray=$(stray_rate "$stray" 1)
          with_decl=$(stray_rate "$decl" 3)
          RES[$name,stray,$round]="$alone $with_stray $with_decl" ;;
      esac
      stop
    done
  done
done

echo
echo "## bench/scripting.sh — $(date -u +%FT%TZ), $ROUNDS round(s), $N calls per run"
echo
echo "| test | tessera | round | redis cpu-us/call | tessera cpu-us/call | tessera/redis | redis calls/s | tessera calls/s |"
echo "|---|---|---|---|---|---|---|---|"
for t in evalsha1_p1 evalsha1_p16 evalsha8_p1; do
  for x_name in $TESSERAS; do
    for round in $(seq "$ROUNDS"); do
      r=${RES[redis,$t,$round]:-}; x=${RES[$x_name,$t,$round]:-}
      [ -z "$r" ] && continue
      read -r rc rr <<<"$r"; read -r xc xr <<<"$x"
      awk -v t="$t" -v n="$x_name" -v round="$round" -v rc="$rc" -v xc="$xc" -v rr="$rr" -v xr="$xr" \
        'BEGIN { printf "| %s | %s | %d | %.2f | %.2f | %.2f | %d | %d |\n", t, n, round, rc, xc, xc / rc, rr, xr }'
    done
  done
done
if [[ " $TESTS " == *" rss "* ]]; then
  echo
  if [ "$RSS_PURGE" = 1 ]; then echo "(each reading after MEMORY PURGE)"; fi
  head="| server | round | RSS after $RSS_WARM warm-up (KB) |"
  rule="|---|---|---|"
  for i in $(seq "$RSS_STEPS"); do head="$head after +$((i * RSS_CALLS)) |"; rule="$rule---|"; done
  echo "$head growth after the warm-up (KB) |"
  echo "$rule---|"
  for name in redis $TESSERAS; do
    for round in $(seq "$ROUNDS"); do
      read -r -a r <<<"${RES[$name,rss,$round]}"
      line="| $name | $round |"
      for v in "${r[@]}"; do line="$line $v |"; done
      echo "$line $((r[${#r[@]} - 1] - r[0])) |"
    done
  done
fi
if [[ " $TESTS " == *" stray "* ]]; then
  echo
  echo "| server | round | GET/SET ops/s alone | with undeclared-key scripts (their calls/s) | with declared-key scripts (their calls/s) | undeclared / alone | undeclared / declared |"
  echo "|---|---|---|---|---|---|---|"
  for name in redis $TESSERAS; do
    for round in $(seq "$ROUNDS"); do
      read -r al st sc de dc <<<"${RES[$name,stray,$round]}"
      awk -v n="$name" -v r="$round" -v al="$al" -v st="$st" -v de="$de" -v sc="$sc" -v dc="$dc" \
        'BEGIN { printf "| %s | %d | %d | %d (%d) | %d (%d) | %.2f | %.2f |\n", n, r, al, st, sc, de, dc, st / al, st / de }'
    done
  done
fi
