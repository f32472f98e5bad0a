#!/usr/bin/env bash
# bench/tx.sh — multi-key commands (issue 3): Tessera next to Redis 7.
#
#   bench/tx.sh [NAME=CMD ...]
#
# Measures, with redis-benchmark, 50 clients, pipeline 1 and 16:
#
#   mset10   MSET key:__rand_int__ V ... (10 keys, 64-byte values)
#   mget10   MGET key:__rand_int__ ...   (10 keys)
#   set      redis-benchmark -t set -d 64 (single key)
#   get      redis-benchmark -t get       (single key)
#
# Every __rand_int__ occurrence gets its own random number (0..KEYSPACE-1,
# printed as 12 digits), so the 10 keys of one command are distinct and spread
# over hash slots: with 2 shards, 99.8% of the MSET/MGET commands touch both.
# The keyspace (key:000000000000 .. key:<KEYSPACE-1>) is preloaded on every
# server before measuring, so GET/MGET hit.
#
# Servers (started the way bench/compare.sh starts them, each on a free
# loopback port, unpinned unless BENCH_SERVER_CPUS is set):
#   redis    redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no
#   tessera  target/release/tessera --port $PORT --bind 127.0.0.1 (default
#            shards: one per CPU)
# Extra NAME=CMD arguments add servers (CMD run as `exec CMD` with PORT
# exported; quote it in single quotes), e.g. a "before" build for a
# before/after comparison in one run:
#   bench/tx.sh 'tessera-old=/tmp/old/tessera --port $PORT --bind 127.0.0.1'
#
# Method: one unmeasured probe per test and server (warm-up, and the rate
# that sizes the measured run to about BENCH_SECONDS), then BENCH_ROUNDS
# rounds; in each round every test runs on every server, the server order
# rotating from round to round (redis first, then tessera first, ...).
# Tables show the median over rounds. Server CPU = utime+stime of the server
# PID (all threads) from /proc/PID/stat right before and after a run;
# cpu-us/op = that / requests. One MSET or MGET of 10 keys counts as 1 op.
#
# Environment (all optional):
#   BENCH_ROUNDS       rounds (default 3)
#   BENCH_SECONDS      target length of one measured run (default 2.5)
#   BENCH_REQUESTS     fixed request count for every measured run (overrides
#                      BENCH_SECONDS sizing)
#   BENCH_PIPELINES    pipeline depths (default "1 16")
#   BENCH_TESTS        subset of mset10 mget10 set get (default: all four)
#   BENCH_CLIENTS      connections (default 50)
#   BENCH_KEYSPACE     -r keyspace and preload size (default 100000)
#   BENCH_CLIENT_CPUS  taskset CPU list for redis-benchmark (default unpinned)
#   BENCH_SERVER_CPUS  taskset CPU list for the servers (default unpinned)
#   BENCH_TIMEOUT      hard cap in seconds per redis-benchmark run (default 120)
#   BENCH_PORT_MIN, BENCH_PORT_SPAN  servers' ports are picked from
#                      [MIN, MIN + SPAN) (default 20000 and 12000; on a
#                      machine shared by several people, give each a range)
#   TESSERA_BENCH_BIN  Tessera binary to use (skips the build)
#   BENCH_SKIP_BUILD=1 do not run cargo build --release
#   REDIS_SERVER, REDIS_BENCHMARK, REDIS_CLI  binaries (default from PATH)
#   OUT_DIR            raw results and report (default
#                      ./bench-results/tx-<timestamp>)
#
# Default run: 2 servers x 8 tests x 3 rounds x 2.5 s, about 2.5 minutes.
# Smoke run:   BENCH_ROUNDS=1 BENCH_SECONDS=0.3 bench/tx.sh
#
# Output: $OUT_DIR/results.csv (every measured run), $OUT_DIR/report.md
# (also printed), server logs, redis-benchmark output. The script only ever
# signals PIDs it started itself.

set -u
set -o pipefail

die() { echo "tx.sh: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || die "cannot cd to $ROOT"

RB=${REDIS_BENCHMARK:-redis-benchmark}
CLI=${REDIS_CLI:-redis-cli}
RS=${REDIS_SERVER:-redis-server}
ROUNDS=${BENCH_ROUNDS:-3}
PORT_MIN=${BENCH_PORT_MIN:-20000}
PORT_SPAN=${BENCH_PORT_SPAN:-12000}
SECONDS_PER_RUN=${BENCH_SECONDS:-2.5}
FIXED_N=${BENCH_REQUESTS:-}
PIPELINES=${BENCH_PIPELINES:-1 16}
TESTNAMES=${BENCH_TESTS:-mset10 mget10 set get}
CLIENTS=${BENCH_CLIENTS:-50}
KEYSPACE=${BENCH_KEYSPACE:-100000}
TEST_TIMEOUT=${BENCH_TIMEOUT:-120}
OUT_DIR=${OUT_DIR:-./bench-results/tx-$(date +%Y%m%d-%H%M%S)}
VALSIZE=64
NKEYS=10

for b in "$RB" "$CLI" "$RS" awk timeout; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found"
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[[ "$PORT_MIN" =~ ^[1-9][0-9]*$ && "$PORT_SPAN" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PORT_MIN and BENCH_PORT_SPAN must be positive integers"
[[ "$KEYSPACE" =~ ^[1-9][0-9]*$ ]] || die "BENCH_KEYSPACE must be a positive integer"
[ -z "$FIXED_N" ] || [[ "$FIXED_N" =~ ^[1-9][0-9]*$ ]] || die "BENCH_REQUESTS must be a positive integer"
for t in $TESTNAMES; do
  case "$t" in mset10 | mget10 | set | get) ;; *) die "unknown test '$t' (mset10 mget10 set get)" ;; esac
done
for p in $PIPELINES; do [[ "$p" =~ ^[1-9][0-9]*$ ]] || die "bad pipeline depth '$p'"; done

if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release || die "cargo build --release failed"
  fi
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera
fi
[ -x "$BIN" ] || die "$BIN is not an executable"

QBIN=$(printf '%q' "$BIN")
QRS=$(printf '%q' "$RS")
NAMES=(redis tessera)
# shellcheck disable=SC2016
CMDS=("$QRS"' --bind 127.0.0.1 --port $PORT --save "" --appendonly no'
  "$QBIN --port \$PORT --bind 127.0.0.1")
for arg in "$@"; do
  case "$arg" in *=*) ;; *) die "argument '$arg' is not NAME=CMD" ;; esac
  name=${arg%%=*}
  [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad server name '$name'"
  [ -n "${arg#*=}" ] || die "empty command for '$name'"
  NAMES+=("$name")
  CMDS+=("${arg#*=}")
done
NSRV=${#NAMES[@]}

CLIENT_PIN=()
SERVER_PIN=()
if [ -n "${BENCH_CLIENT_CPUS:-}" ]; then CLIENT_PIN=(taskset -c "$BENCH_CLIENT_CPUS"); fi
if [ -n "${BENCH_SERVER_CPUS:-}" ]; then SERVER_PIN=(taskset -c "$BENCH_SERVER_CPUS"); fi

mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- processes
declare -A PID PORTOF LIVE

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  local p tries=0
  while :; do
    # Below Linux's ephemeral range (32768-60999): the many client sockets
    # of concurrent benchmarks cannot hold the port, unseen by this probe.
    p=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN))
    if ! port_in_use "$p"; then echo "$p"; return 0; fi
    tries=$((tries + 1))
    [ $tries -lt 200 ] || return 1
  done
}

# utime+stime of a PID in clock ticks (all threads of the process).
cpu_ticks() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo NA; return; }
  rest=${stat##*) }
  # shellcheck disable=SC2086
  set -- $rest
  echo $((${12} + ${13}))
}

# Context switches (voluntary and not) of a PID's threads so far. On these
# VMs a thread that sleeps and is woken costs several microseconds of host
# work (an idle vCPU halts; waking it takes an interrupt), so switches per
# op explain most of the difference between servers at pipeline 1.
ctx_switches() {
  cat /proc/"$1"/task/*/status 2>/dev/null |
    awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { n += $2; f = 1 } END { if (f) print n; else print "NA" }'
}

# Busy jiffies of the whole machine (first line of /proc/stat).
machine_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

stop_pid() {
  local pid=$1 i
  [ -n "${LIVE[$pid]:-}" ] || return 0 # never signal a PID we did not start
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
  fi
  wait "$pid" 2>/dev/null
  unset "LIVE[$pid]"
}

cleanup() {
  local p
  for p in "${!LIVE[@]}"; do stop_pid "$p"; done
}
trap cleanup EXIT
trap 'echo "tx.sh: interrupted" >&2; exit 130' INT TERM

cli() { timeout 30 "$CLI" -h 127.0.0.1 -p "$1" "${@:2}"; }

# start_server INDEX -> sets PID[$name] PORTOF[$name]. A server that exits
# at startup is retried on another port (the port may have been taken between
# pick_port and bind), three attempts in all.
start_server() {
  local i=$1 name=${NAMES[$1]} cmd=${CMDS[$1]} port pid n log attempt
  log="$OUT_DIR/server-$name.log"
  for attempt in 1 2 3; do
    port=$(pick_port) || die "no free port found"
    PORT=$port "${SERVER_PIN[@]}" bash -c "exec $cmd" >"$log" 2>&1 </dev/null &
    pid=$!
    LIVE[$pid]=1
    for n in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      [ "$(cli "$port" PING 2>/dev/null)" = PONG ] && break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && break
    stop_pid "$pid"
    tail -5 "$log" >&2
    [ $attempt -lt 3 ] || die "server '$name' exited during startup (see $log)"
    echo "  $name exited during startup on port $port; retrying on another port" >&2
  done
  [ "$(cli "$port" PING 2>/dev/null)" = PONG ] || die "server '$name' did not answer PING on port $port"
  cli "$port" CONFIG SET save "" >/dev/null 2>&1
  cli "$port" CONFIG SET appendonly no >/dev/null 2>&1
  PID[$name]=$pid
  PORTOF[$name]=$port
}

server_version() {
  cli "$1" INFO server 2>/dev/null | tr -d '\r' | awk -F: '
    $1 == "redis_version" { rv = $2 }
    $1 == "tessera_version" { tv = $2 }
    $1 == "tessera_shards" { ts = $2 }
    END { if (tv != "") print "tessera " tv ", " ts " shards"; else print "redis_version " rv }'
}

# Preload key:000000000000 .. key:<KEYSPACE-1> (the names __rand_int__
# produces) with 64-byte values, then check the multi-key commands answer.
preload() {
  local name=$1 port=${PORTOF[$1]} dbs got i
  awk -v n="$KEYSPACE" -v d="$VALSIZE" 'BEGIN {
    v = sprintf("%0" d "d", 0); gsub(/0/, "x", v)
    for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$%d\r\n%s\r\n", i, d, v
  }' | timeout 120 "$CLI" -h 127.0.0.1 -p "$port" --pipe >"$OUT_DIR/preload-$name.out" 2>&1 ||
    die "preload of $name failed (see $OUT_DIR/preload-$name.out)"
  dbs=$(cli "$port" DBSIZE 2>/dev/null | tr -d '\r')
  [ "$dbs" = "$KEYSPACE" ] || echo "  !! $name: DBSIZE $dbs after preloading $KEYSPACE keys" >&2
  # Sanity: an MSET of 10 keys, read back. tx-sanity:0..9 have slots 2257..14778,
  # in every quarter of the slot range (so on every shard with up to 4 shards).
  local args=() keys=()
  for i in $(seq 0 $((NKEYS - 1))); do
    keys+=("tx-sanity:$i")
    args+=("tx-sanity:$i" "v$i")
  done
  got=$(cli "$port" MSET "${args[@]}" 2>&1 | tr -d '\r')
  [ "$got" = OK ] || die "$name: MSET of $NKEYS keys answered '$got'"
  got=$(cli "$port" MGET "${keys[@]}" 2>&1 | tr -d '\r' | tr '\n' ' ')
  [ "$got" = "v0 v1 v2 v3 v4 v5 v6 v7 v8 v9 " ] || die "$name: MGET of $NKEYS keys answered '$got'"
  cli "$port" DEL "${keys[@]}" >/dev/null 2>&1
}

# ---------------------------------------------------------------- tests
VAL=$(awk -v d="$VALSIZE" 'BEGIN { v = sprintf("%0" d "d", 0); gsub(/0/, "v", v); print v }')

# test_args NAME PIPELINE -> sets ARGS (redis-benchmark arguments minus -c/-n)
ARGS=()
test_args() {
  local i
  ARGS=(-P "$2" -r "$KEYSPACE")
  case "$1" in
    mset10)
      ARGS+=(MSET)
      for i in $(seq 1 $NKEYS); do ARGS+=("key:__rand_int__" "$VAL"); done
      ;;
    mget10)
      ARGS+=(MGET)
      for i in $(seq 1 $NKEYS); do ARGS+=("key:__rand_int__"); done
      ;;
    set) ARGS+=(-t set -d "$VALSIZE") ;;
    get) ARGS+=(-t get -d "$VALSIZE") ;;
  esac
}

TESTS=()
for p in $PIPELINES; do
  for t in $TESTNAMES; do TESTS+=("${t}_p$p"); done
done

RESULTS="$OUT_DIR/results.csv"
echo "round,test,server,requests,ops_per_sec,p50_ms,p99_ms,wall_s,server_cpu_s,client_cpu_s,cpu_us_per_op,server_cores,client_cores,other_cores,ctx_switches_per_op" >"$RESULTS"

now_ns() { date +%s%N; }

# rb OUT PORT N -- runs redis-benchmark with ARGS (last: a custom command
# takes every argument after it, so options go first) in the background (so
# INT/TERM reach the script at once); returns its exit status. Its user+sys
# time lands in $TIMES_FILE (`times` of the wrapper bash, second line =
# waited-for children), as in bench/harness/compare.sh.
TIMES_FILE="$OUT_DIR/.times"
export TIMES_FILE
rb() {
  local out=$1 port=$2 n=$3 p rc
  : >"$TIMES_FILE"
  # shellcheck disable=SC2016
  timeout "$TEST_TIMEOUT" bash -c '"$@"; rc=$?; times >"$TIMES_FILE"; exit $rc' rb \
    "${CLIENT_PIN[@]}" "$RB" -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" \
    --csv "${ARGS[@]}" >"$out" 2>"$out.err" &
  p=$!
  LIVE[$p]=1
  wait "$p"
  rc=$?
  unset "LIVE[$p]"
  return $rc
}

# Last CSV data line: "TEST","rps","avg","min","p50","p95","p99","max".
times_to_s() {
  # "0m1.234s 0m0.567s" -> 1.801
  tail -1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] } printf "%.3f", s }'
}

rb_fields() { grep -v '^"test"' "$1" | tail -1 | tr -d '"' | awk -F, 'NF >= 7 { print $(NF - 6), $(NF - 3), $(NF - 1) }'; }

declare -A NREQ
# Requests of a probe run (also the floor of a measured run).
probe_n() { if [ $(($1 * 2000)) -ge 5000 ]; then echo $(($1 * 2000)); else echo 5000; fi; }

size_test() {
  local tname=$1 name=$2 pipe=${1##*_p} probe out rps
  probe=$(probe_n "$pipe")
  test_args "${tname%_p*}" "$pipe"
  out="$OUT_DIR/probe-$tname-$name.out"
  rb "$out" "${PORTOF[$name]}" "$probe" || die "probe $tname on $name failed: $(tail -2 "$out.err")"
  read -r rps _ _ < <(rb_fields "$out")
  [ -n "${rps:-}" ] || die "probe $tname on $name: no result (see $out)"
  if [ -n "$FIXED_N" ]; then
    NREQ[$tname,$name]=$FIXED_N
  else
    NREQ[$tname,$name]=$(awk -v r="$rps" -v s="$SECONDS_PER_RUN" -v p="$probe" \
      'BEGIN { n = int(r * s); if (n < p) n = p; print n }')
  fi
  printf '  probe %-10s %-12s %10.0f ops/s -> %s requests per run\n' "$tname" "$name" "$rps" "${NREQ[$tname,$name]}"
}

run_test() {
  local round=$1 tname=$2 name=$3 pipe=${2##*_p}
  local port=${PORTOF[$3]} pid=${PID[$3]} n=${NREQ[$2,$3]} log c0 c1 x0 x1 t0 t1 m0 m1 rc ops p50 p99
  test_args "${tname%_p*}" "$pipe"
  log="$OUT_DIR/$tname-$name-r$round.out"
  m0=$(machine_busy); c0=$(cpu_ticks "$pid"); x0=$(ctx_switches "$pid"); t0=$(now_ns)
  rb "$log" "$port" "$n"
  rc=$?
  t1=$(now_ns); c1=$(cpu_ticks "$pid"); x1=$(ctx_switches "$pid"); m1=$(machine_busy)
  read -r ops p50 p99 < <(rb_fields "$log")
  if [ $rc -ne 0 ] || [ -z "${ops:-}" ]; then
    echo "  !! $tname on $name failed (rc=$rc): $(tail -2 "$log.err" | tr '\n' ' ')" >&2
    ops=NA; p50=NA; p99=NA
  fi
  local wall srv_s cli_s cpuop csop srv_cores cli_cores oth_cores
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
  if [ "$c0" = NA ] || [ "$c1" = NA ]; then srv_s=NA; else
    srv_s=$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", (b - a) / hz }'); fi
  if [ -s "$TIMES_FILE" ]; then cli_s=$(times_to_s "$TIMES_FILE"); else cli_s=NA; fi
  cpuop=$(awk -v s="$srv_s" -v n="$n" 'BEGIN { if (s == "NA") print "NA"; else printf "%.3f", s * 1e6 / n }')
  csop=$(awk -v a="$x0" -v b="$x1" -v n="$n" 'BEGIN { if (a == "NA" || b == "NA") print "NA"; else printf "%.3f", (b - a) / n }')
  srv_cores=$(awk -v s="$srv_s" -v w="$wall" 'BEGIN { if (s == "NA" || w == 0) print "NA"; else printf "%.2f", s / w }')
  cli_cores=$(awk -v s="$cli_s" -v w="$wall" 'BEGIN { if (s == "NA" || w == 0) print "NA"; else printf "%.2f", s / w }')
  # Busy CPU of the machine minus server and load generator, per wall
  # second: noise from other processes.
  oth_cores=$(awk -v a="$m0" -v b="$m1" -v hz="$CLK_TCK" -v w="$wall" -v s="$srv_s" -v c="$cli_s" 'BEGIN {
    if (w == 0 || s == "NA" || c == "NA") { print "NA"; exit }
    o = ((b - a) / hz - s - c) / w; if (o < 0) o = 0; printf "%.2f", o }')
  echo "$round,$tname,$name,$n,$ops,$p50,$p99,$wall,$srv_s,$cli_s,$cpuop,$srv_cores,$cli_cores,$oth_cores,$csop" >>"$RESULTS"
  printf '  %-10s %-12s %10s ops/s  p50 %6s  p99 %6s ms  %7s cpu-us/op  %6s cs/op  cores srv %4s cli %4s other %4s\n' \
    "$tname" "$name" "$ops" "$p50" "$p99" "$cpuop" "$csop" "$srv_cores" "$cli_cores" "$oth_cores"
  # Resize the next round's run from this rate, so machine drift does not
  # blow the time budget.
  if [ -z "$FIXED_N" ] && [ "$ops" != NA ]; then
    NREQ[$tname,$name]=$(awk -v r="$ops" -v s="$SECONDS_PER_RUN" -v p="$(probe_n "$pipe")" \
      'BEGIN { n = int(r * s); if (n < p) n = p; print n }')
  fi
}

# ---------------------------------------------------------------- main
T_START=$(date +%s)
{
  echo "# bench/tx.sh run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) CPUs; git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- crates src 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "tessera binary: $BIN (built $(date -r "$BIN" '+%Y-%m-%d %H:%M:%S'))"
  echo "load generator: $("$RB" --version 2>/dev/null | head -1); clients=$CLIENTS; keyspace=$KEYSPACE; value=$VALSIZE B; rounds=$ROUNDS; $([ -n "$FIXED_N" ] && echo "requests=$FIXED_N" || echo "~${SECONDS_PER_RUN}s per run")"
  echo "client pinning: ${BENCH_CLIENT_CPUS:-none}; server pinning: ${BENCH_SERVER_CPUS:-none}"
} >"$OUT_DIR/header.txt"
cat "$OUT_DIR/header.txt"

echo "== starting servers, preloading $KEYSPACE keys"
declare -A VERSION
for i in $(seq 0 $((NSRV - 1))); do
  name=${NAMES[$i]}
  start_server "$i"
  VERSION[$name]=$(server_version "${PORTOF[$name]}")
  preload "$name"
  echo "  $name: pid ${PID[$name]} port ${PORTOF[$name]} (${VERSION[$name]})"
  echo "  $name: ${CMDS[$i]}" >>"$OUT_DIR/header.txt"
done

echo "== probes (unmeasured warm-up, sizes each run)"
for t in "${TESTS[@]}"; do
  for i in $(seq 0 $((NSRV - 1))); do size_test "$t" "${NAMES[$i]}"; done
done

for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round/$ROUNDS"
  for t in "${TESTS[@]}"; do
    for j in $(seq 0 $((NSRV - 1))); do
      run_test "$round" "$t" "${NAMES[$(((round - 1 + j) % NSRV))]}"
    done
  done
done

for i in $(seq 0 $((NSRV - 1))); do stop_pid "${PID[${NAMES[$i]}]}"; done
rm -f "$TIMES_FILE"

REPORT="$OUT_DIR/report.md"
{
  cat "$OUT_DIR/header.txt"
  echo
  echo "Servers:"
  for i in $(seq 0 $((NSRV - 1))); do echo "- ${NAMES[$i]}: ${VERSION[${NAMES[$i]}]}"; done
  echo
  echo "Median over $ROUNDS round(s). One MSET/MGET of $NKEYS keys = 1 op. cpu-us/op = server CPU"
  echo "(utime+stime) per op; cs/op = the server's context switches (all threads) per op; srv cores = server CPU / wall; other cores = busy CPU of the machine"
  echo "minus server and redis-benchmark, per wall second (noise); spread = (max - min) / median of"
  echo "ops/s over rounds. p50/p99: redis-benchmark's latency, from writing a batch of -P commands to"
  echo "the first byte of the first reply. Ratios are against ${NAMES[0]} (ops/s: higher is better;"
  echo "cpu/op, p99: lower is better)."
  echo
  awk -F, -v order="${NAMES[*]}" '
    function median(list,   arr, n, i, j, t) {
      n = split(list, arr, " ")
      if (n == 0) return "NA"
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] + 0 < arr[i] + 0) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
      return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    function spread(list,   arr, n, i, lo, hi, m) {
      n = split(list, arr, " ")
      if (n < 2) return "-"
      lo = hi = arr[1] + 0
      for (i = 2; i <= n; i++) { if (arr[i] + 0 < lo) lo = arr[i] + 0; if (arr[i] + 0 > hi) hi = arr[i] + 0 }
      m = median(list)
      return (m > 0) ? sprintf("%.0f%%", (hi - lo) * 100 / m) : "-"
    }
    function add(k, v) { if (v != "NA" && v != "") L[k] = L[k] " " v }
    function get(k) { return (k in L) ? median(L[k]) : "NA" }
    function fmt(f, v) { return (v == "NA") ? v : sprintf(f, v) }
    function ratio(a, b) { return (a != "NA" && b != "NA" && b > 0) ? sprintf("%.2f", a / b) : "NA" }
    NR == 1 { next }
    {
      key = $2 SUBSEP $3
      if (!($2 in seen)) { seen[$2] = 1; tests[++nt] = $2 }
      add(key SUBSEP "ops", $5); add(key SUBSEP "p50", $6); add(key SUBSEP "p99", $7)
      add(key SUBSEP "cpu", $11); add(key SUBSEP "sc", $12); add(key SUBSEP "oc", $14); add(key SUBSEP "cs", $15)
      if ($14 != "NA" && $14 + 0 > maxoc) maxoc = $14 + 0
    }
    END {
      ns = split(order, srv, " ")
      print "| test | server | ops/s | spread | p50 ms | p99 ms | cpu-us/op | cs/op | srv cores | other cores | ops/s vs " srv[1] " | cpu/op vs " srv[1] " | p99 vs " srv[1] " |"
      print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (t = 1; t <= nt; t++) {
        b = tests[t] SUBSEP srv[1]
        for (s = 1; s <= ns; s++) {
          k = tests[t] SUBSEP srv[s]
          ops = get(k SUBSEP "ops")
          printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", tests[t], srv[s],
            fmt("%.0f", ops), (k SUBSEP "ops" in L) ? spread(L[k SUBSEP "ops"]) : "-",
            fmt("%.3f", get(k SUBSEP "p50")), fmt("%.3f", get(k SUBSEP "p99")), fmt("%.3f", get(k SUBSEP "cpu")),
            fmt("%.3f", get(k SUBSEP "cs")),
            fmt("%.2f", get(k SUBSEP "sc")), fmt("%.2f", get(k SUBSEP "oc")),
            ratio(ops, get(b SUBSEP "ops")), ratio(get(k SUBSEP "cpu"), get(b SUBSEP "cpu")),
            ratio(get(k SUBSEP "p99"), get(b SUBSEP "p99"))
        }
      }
      if (maxoc > 0.25)
        printf "\nNOISY: other processes used up to %.2f cores during a run (other cores column); on a\n2-core machine treat the ratios as rough, or rerun when the machine is idle.\n", maxoc
    }' "$RESULTS"
  echo
  echo "Total wall time: $(($(date +%s) - T_START)) s. Raw data: $RESULTS."
} >"$REPORT"

echo
cat "$REPORT"
