#!/usr/bin/env bash
# bench/types.sh — collection types (issue 4): Tessera next to Redis 7.
#
#   bench/types.sh [NAME=CMD ...]
#
# 1. Throughput and server CPU per op, redis-benchmark, 50 clients, pipeline 1
#    and 16 (R = BENCH_TYPE_KEYS, default 1000; V = 16-byte value):
#
#   lpush   LPUSH list:__rand_int__ V                    -r R
#   lpop    LPOP plist:__rand_int__                      -r R (lists pre-filled)
#   sadd    SADD set:__rand_int__ m:__rand_int__         -r R
#   hset    HSET hash:__rand_int__ f:__rand_int__ V      -r R
#   zadd    ZADD zset:__rand_int__ __rand_int__ m:__rand_int__   -r R
#   zrange  ZRANGE zr:__rand_int__ 0 9 WITHSCORES        -r ZK (preloaded)
#
#   Every __rand_int__ gets its own random number in 0..R-1 (12 digits), so a
#   write test spreads over R keys (both shards of Tessera; a single hot key
#   would measure one shard's queue, not the type) and adds random members to
#   them, a mix of inserts and updates of existing members. Before every write
#   run (unmeasured) the test's R keys are deleted and each gets B =
#   BENCH_BASE_ELEMS (600) elements (members/fields b:NNNNNNNNNNNN, which the
#   benchmark's m:/f: ones never touch), so every run, short or long, works on
#   structures of 600+ elements: past Redis's listpack limits (512 hash
#   fields, 128 sorted-set members; 7.0 sets of strings are always hashtable),
#   i.e. in the big encodings (hashtable, skiplist, quicklist), whatever the
#   run length. BENCH_BASE_ELEMS=0 starts from empty keys instead (short runs
#   then stay in listpack). The small-object case is what memory test (a)
#   measures. Every
#   server gets the same request count for a test, so all do the same work on
#   structures of the same size; the log and results.csv show the elements
#   per key after each run and OBJECT ENCODING of key 0.
#   lpop: before every run each of the R lists gets n/R + 6*sqrt(n/R) + 64
#   elements (unmeasured), so pops hit; after the run the script counts what is
#   left (sum of LLEN) and flags the run if any pop missed. lpush: the sum of
#   LLEN after the run must be R*B + the request count (redis-benchmark may
#   send up to clients*pipeline more), or the run is flagged.
#   zrange: ZK = BENCH_ZRANGE_KEYS (100) sorted sets zr:NNNNNNNNNNNN of
#   ZM = BENCH_ZRANGE_MEMBERS (1000) members m:NNNNNNNNNNNN with score N,
#   inserted in scrambled order, loaded once at start.
#
# 2. Memory per element, fresh server for each test, loaded with redis-cli
#    --pipe from a generated RESP file (M = BENCH_MEM_N, default 1000000):
#
#   hash    M hashes hash:NNNNNNN (12-byte keys), each one
#           HSET key field1 vNNNNNNN field2 vNNNNNNN field3 vNNNNNNN
#                    field4 <int 0..99999> field5 <int 0..99>
#           (5 fields, 6-byte names, three 8-byte strings, two small integers)
#           -> bytes per hash and per field
#   zset    one sorted set "bigzset" of M members member:NNNNNNN (14 bytes),
#           integer scores, ZADD of 1000 members per command, scrambled order
#           -> bytes per member
#
#   bytes/element = (VmRSS after load - VmRSS of the empty server, from
#   /proc/PID/status) / count. used_memory from INFO memory is shown too, but
#   Tessera has no allocator hook yet (its used_memory is its RSS), so RSS is
#   the comparable figure.
#
# Servers (as bench/tx.sh starts them, each on a free loopback port, unpinned
# unless BENCH_SERVER_CPUS is set):
#   redis    redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no
#   tessera  target/release/tessera --port $PORT --bind 127.0.0.1 (default
#            shards: one per CPU)
# Extra NAME=CMD arguments add servers (CMD run as `exec CMD` with PORT
# exported; quote it in single quotes). A NAME that is already there
# replaces that server's command, which is how to validate the script with
# Redis on both sides before Tessera has the types:
#   bench/types.sh 'tessera=redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no'
# (TESSERA_BENCH_BIN=/usr/bin/redis-server does the same: redis-server takes
# --port/--bind, and every server gets CONFIG SET save "" after start.)
#
# A command a server does not know (or answers wrongly) is reported for that
# test and server ("unsupported: ERR unknown command 'LPUSH'"), never as a
# rate: each test's commands are checked with exact expected replies before
# any run, redis-benchmark's "Error from server" / exit status / 0 rps mark a
# run failed, and the other tests and servers go on.
#
# Method (as bench/tx.sh): one unmeasured probe per test and server (warm-up;
# the mean probe rate sizes the measured runs to about BENCH_SECONDS), then
# BENCH_ROUNDS rounds; in each round every test runs on every server, the
# server order rotating from round to round. Tables show the median over
# rounds. Server CPU = utime+stime of the server PID (all threads) from
# /proc/PID/stat right before and after a run; cpu-us/op = that / requests.
#
# Environment (all optional):
#   BENCH_ROUNDS          rounds (default 3)
#   BENCH_SECONDS         target length of one measured run (default 2.5)
#   BENCH_REQUESTS        fixed request count for every measured run
#   BENCH_PIPELINES       pipeline depths (default "1 16")
#   BENCH_TESTS           subset of lpush lpop sadd hset zadd zrange (default
#                         all; set but empty: no throughput tests)
#   BENCH_CLIENTS         connections (default 50)
#   BENCH_TYPE_KEYS       R above (default 1000)
#   BENCH_BASE_ELEMS      B above (default 600; 0 = write runs start empty)
#   BENCH_ZRANGE_KEYS     ZK above (default 100)
#   BENCH_ZRANGE_MEMBERS  ZM above (default 1000)
#   BENCH_MEM_N           M above (default 1000000; 0 skips the memory tests)
#   BENCH_MEM_TESTS       subset of hash zset (default both)
#   BENCH_CLIENT_CPUS     taskset CPU list for redis-benchmark (default unpinned)
#   BENCH_SERVER_CPUS     taskset CPU list for the servers (default unpinned)
#   BENCH_TIMEOUT         hard cap in seconds per redis-benchmark run and per
#                         memory load (default 120)
#   TESSERA_BENCH_BIN     Tessera binary to use (skips the build)
#   BENCH_SKIP_BUILD=1    do not run cargo build --release
#   REDIS_SERVER, REDIS_BENCHMARK, REDIS_CLI  binaries (default from PATH)
#   OUT_DIR               raw results and report (default
#                         ./bench-results/types-<timestamp>)
#
# Default run: 2 servers x 12 tests x (probe + 3 rounds) x 2.5 s plus the
# memory loads (up to ~0.2 GB of generated RESP in $OUT_DIR, removed after
# use): about
# 5 minutes, needing some 2 GB of RAM.
# Smoke run: BENCH_ROUNDS=1 BENCH_SECONDS=0.3 BENCH_MEM_N=20000 bench/types.sh
#
# Output: $OUT_DIR/results.csv (every measured run), $OUT_DIR/memory.csv,
# $OUT_DIR/report.md (also printed), server logs, redis-benchmark output. The
# script only ever signals PIDs it started itself.

set -u
set -o pipefail

die() { echo "types.sh: $*" >&2; exit 1; }
warn() { echo "  !! $*" >&2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || die "cannot cd to $ROOT"

RB=${REDIS_BENCHMARK:-redis-benchmark}
CLI=${REDIS_CLI:-redis-cli}
RS=${REDIS_SERVER:-redis-server}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-2.5}
FIXED_N=${BENCH_REQUESTS:-}
PIPELINES=${BENCH_PIPELINES:-1 16}
TESTNAMES=${BENCH_TESTS-lpush lpop sadd hset zadd zrange}
CLIENTS=${BENCH_CLIENTS:-50}
TYPE_KEYS=${BENCH_TYPE_KEYS:-1000}
BASE=${BENCH_BASE_ELEMS:-600}
ZR_KEYS=${BENCH_ZRANGE_KEYS:-100}
ZR_MEMBERS=${BENCH_ZRANGE_MEMBERS:-1000}
MEM_N=${BENCH_MEM_N:-1000000}
MEM_TESTS=${BENCH_MEM_TESTS:-hash zset}
TEST_TIMEOUT=${BENCH_TIMEOUT:-120}
OUT_DIR=${OUT_DIR:-./bench-results/types-$(date +%Y%m%d-%H%M%S)}
VALSIZE=16
MEM_BATCH=1000

for b in "$RB" "$CLI" "$RS" awk timeout; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found"
done
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer (got '$2')"; }
posint BENCH_ROUNDS "$ROUNDS"
posint BENCH_CLIENTS "$CLIENTS"
posint BENCH_TYPE_KEYS "$TYPE_KEYS"
posint BENCH_ZRANGE_KEYS "$ZR_KEYS"
posint BENCH_TIMEOUT "$TEST_TIMEOUT"
posint BENCH_ZRANGE_MEMBERS "$ZR_MEMBERS"
[ "$ZR_MEMBERS" -ge 10 ] || die "BENCH_ZRANGE_MEMBERS must be at least 10"
[[ "$BASE" =~ ^[0-9]+$ ]] || die "BENCH_BASE_ELEMS must be a non-negative integer"
[[ "$MEM_N" =~ ^[0-9]+$ ]] || die "BENCH_MEM_N must be a non-negative integer"
[[ "$SECONDS_PER_RUN" =~ ^[0-9]*[.]?[0-9]+$ ]] || die "BENCH_SECONDS must be a number"
[ -z "$FIXED_N" ] || posint BENCH_REQUESTS "$FIXED_N"
for t in $TESTNAMES; do
  case "$t" in lpush | lpop | sadd | hset | zadd | zrange) ;; *) die "unknown test '$t' (lpush lpop sadd hset zadd zrange)" ;; esac
done
for t in $MEM_TESTS; do
  case "$t" in hash | zset) ;; *) die "unknown memory test '$t' (hash zset)" ;; esac
done
for p in $PIPELINES; do posint "pipeline depth" "$p"; done

NAMES=(redis tessera)
QRS=$(printf '%q' "$RS")
# shellcheck disable=SC2016
CMDS=("$QRS"' --bind 127.0.0.1 --port $PORT --save "" --appendonly no' "")
TESSERA_CMD_GIVEN=0
for arg in "$@"; do
  case "$arg" in *=*) ;; *) die "argument '$arg' is not NAME=CMD" ;; esac
  name=${arg%%=*}
  [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad server name '$name'"
  [ -n "${arg#*=}" ] || die "empty command for '$name'"
  found=
  for i in "${!NAMES[@]}"; do
    if [ "${NAMES[$i]}" = "$name" ]; then CMDS[i]=${arg#*=}; found=1; fi
  done
  [ "$name" = tessera ] && TESSERA_CMD_GIVEN=1
  if [ -z "$found" ]; then
    NAMES+=("$name")
    CMDS+=("${arg#*=}")
  fi
done
NSRV=${#NAMES[@]}

BIN=
if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
elif [ $TESSERA_CMD_GIVEN = 0 ]; then
  if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release || die "cargo build --release failed"
  fi
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera
fi
if [ -n "$BIN" ]; then
  [ -x "$BIN" ] || die "$BIN is not an executable"
  [ $TESSERA_CMD_GIVEN = 1 ] || CMDS[1]="$(printf '%q' "$BIN") --port \$PORT --bind 127.0.0.1"
fi

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
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
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

rss_kb() { awk '/^VmRSS:/ { print $2; f = 1 } END { if (!f) print "NA" }' "/proc/$1/status" 2>/dev/null || echo NA; }

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
  rm -f "$OUT_DIR/.times" "$OUT_DIR"/.mem-*.resp
}
trap cleanup EXIT
trap 'echo "types.sh: interrupted" >&2; exit 130' INT TERM

cli() { timeout 30 "$CLI" -h 127.0.0.1 -p "$1" "${@:2}"; }
# Commands one per line on stdin, replies one per line on stdout.
cli_batch() { timeout 120 "$CLI" -h 127.0.0.1 -p "$1" 2>&1; }
# RESP on stdin through --pipe; keeps the first error replies and the summary
# (a server that rejects every command would otherwise fill the disk).
cli_pipe() {
  timeout "$TEST_TIMEOUT" "$CLI" -h 127.0.0.1 -p "$1" --pipe 2>&1 |
    awk '/^errors: / { print; next } /^(All data transferred|Last reply received)/ || /^$/ { next } e++ < 3'
}
# First error reply in cli_pipe output on stdin, CSV-safe.
pipe_err() { grep -m1 -v -E '^(errors: |All data transferred|Last reply received)' | clean_msg; }
# "errors: E, replies: R" of cli_pipe output -> "E R" (NA NA when missing).
pipe_counts() { awk '/^errors: / { gsub(",", ""); print $2, $4; f = 1 } END { if (!f) print "NA NA" }'; }
# One line, no commas or quotes (CSV-safe), without Redis's "with args" tail.
clean_msg() { head -1 | tr -d '\r"' | sed -e 's/, with args beginning with:.*//' | tr ',' ';' | cut -c1-120; }

# start_server INDEX -> sets PID[$name] PORTOF[$name]. A server that exits
# at startup is retried on another port (the port may have been taken between
# pick_port and bind), three attempts in all. LOGTAG names the log file.
start_server() {
  local i=$1 name=${NAMES[$1]} cmd=${CMDS[$1]} port pid n log attempt
  log="$OUT_DIR/server-$name${2:+-$2}.log"
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

used_memory() {
  local u
  u=$(cli "$1" INFO memory 2>/dev/null | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
  echo "${u:-NA}"
}

encoding_of() {
  local e
  e=$(cli "$1" OBJECT ENCODING "$2" 2>/dev/null | tr -d '\r' | head -1)
  case "$e" in "" | *" "*) echo NA ;; *) echo "$e" ;; esac
}

# ---------------------------------------------------------------- RESP generators
VAL=$(awk -v d="$VALSIZE" 'BEGIN { v = sprintf("%0" d "d", 0); gsub(/0/, "v", v); print v }')

# gen_del PREFIX COUNT: DEL PREFIX%012d for 0..COUNT-1, as RESP.
gen_del() {
  awk -v p="$1" -v n="$2" 'BEGIN {
    for (i = 0; i < n; i++) { k = sprintf("%s%012d", p, i); printf "*2\r\n$3\r\nDEL\r\n$%d\r\n%s\r\n", length(k), k }
  }'
}

# gen_fill TEST PREFIX COUNT PER: PER elements into each of COUNT keys with
# the test's write command, at most 1000 elements per command: lists get PER
# copies of VAL; sets, hashes and sorted sets the members (fields)
# b:000000000000.. (hash value VAL, score = index), which the benchmark's
# m:/f: members never touch.
gen_fill() {
  awk -v t="$1" -v p="$2" -v n="$3" -v per="$4" -v v="$VAL" 'BEGIN {
    cmd = (t == "sadd") ? "SADD" : (t == "hset") ? "HSET" : (t == "zadd") ? "ZADD" : "LPUSH"
    w = (t == "hset" || t == "zadd") ? 2 : 1
    ve = sprintf("$%d\r\n%s\r\n", length(v), v)
    for (i = 0; i < n; i++) {
      k = sprintf("%s%012d", p, i)
      for (j = 0; j < per; j += c) {
        c = (per - j > 1000) ? 1000 : per - j
        printf "*%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", c * w + 2, length(cmd), cmd, length(k), k
        for (x = j; x < j + c; x++) {
          if (cmd == "LPUSH") { printf "%s", ve; continue }
          m = sprintf("b:%012d", x)
          if (cmd == "ZADD") { sc = sprintf("%d", x); printf "$%d\r\n%s\r\n", length(sc), sc }
          printf "$%d\r\n%s\r\n", length(m), m
          if (cmd == "HSET") printf "%s", ve
        }
      }
    }
  }'
}

# gen_zsets PREFIX KEYS MEMBERS BATCH MEMBERFMT: ZADD to KEYS sorted sets
# (one key named PREFIX itself when KEYS is 0) MEMBERS members
# sprintf(MEMBERFMT, j) with score j, j scrambled (i * P mod MEMBERS, P prime
# not dividing MEMBERS), BATCH members per command.
gen_zsets() {
  awk -v p="$1" -v nk="$2" -v m="$3" -v b="$4" -v mf="$5" 'BEGIN {
    P = (m % 7919) ? 7919 : 7907
    for (kk = 0; kk < (nk ? nk : 1); kk++) {
      k = nk ? sprintf("%s%012d", p, kk) : p
      for (i = 0; i < m; i += c) {
        c = (m - i > b) ? b : m - i
        printf "*%d\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n", 2 + 2 * c, length(k), k
        for (x = i; x < i + c; x++) {
          j = (x * P) % m; s = sprintf("%d", j); mem = sprintf(mf, j)
          printf "$%d\r\n%s\r\n$%d\r\n%s\r\n", length(s), s, length(mem), mem
        }
      }
    }
  }'
}

# gen_hashes COUNT: the memory test (a) hashes.
gen_hashes() {
  awk -v n="$1" 'BEGIN {
    for (i = 0; i < n; i++) {
      k = sprintf("hash:%07d", i); s = sprintf("v%07d", i % 10000000)
      a = sprintf("%d", i % 100000); b = sprintf("%d", i % 100)
      printf "*12\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n", length(k), k
      printf "$6\r\nfield1\r\n$8\r\n%s\r\n$6\r\nfield2\r\n$8\r\n%s\r\n$6\r\nfield3\r\n$8\r\n%s\r\n", s, s, s
      printf "$6\r\nfield4\r\n$%d\r\n%s\r\n$6\r\nfield5\r\n$%d\r\n%s\r\n", length(a), a, length(b), b
    }
  }'
}

# ---------------------------------------------------------------- tests
prefix_of() {
  case "$1" in lpush) echo list: ;; lpop) echo plist: ;; sadd) echo set: ;; hset) echo hash: ;; zadd) echo zset: ;; zrange) echo zr: ;; esac
}
card_of() {
  case "$1" in lpush | lpop) echo LLEN ;; sadd) echo SCARD ;; hset) echo HLEN ;; zadd | zrange) echo ZCARD ;; esac
}
keys_of() { if [ "$1" = zrange ]; then echo "$ZR_KEYS"; else echo "$TYPE_KEYS"; fi; }

# test_args NAME PIPELINE -> sets ARGS (redis-benchmark arguments minus -c/-n;
# the custom command last, it takes every argument after it).
ARGS=()
test_args() {
  ARGS=(-P "$2")
  case "$1" in
    lpush) ARGS+=(-r "$TYPE_KEYS" LPUSH "list:__rand_int__" "$VAL") ;;
    lpop) ARGS+=(-r "$TYPE_KEYS" LPOP "plist:__rand_int__") ;;
    sadd) ARGS+=(-r "$TYPE_KEYS" SADD "set:__rand_int__" "m:__rand_int__") ;;
    hset) ARGS+=(-r "$TYPE_KEYS" HSET "hash:__rand_int__" "f:__rand_int__" "$VAL") ;;
    zadd) ARGS+=(-r "$TYPE_KEYS" ZADD "zset:__rand_int__" "__rand_int__" "m:__rand_int__") ;;
    zrange) ARGS+=(-r "$ZR_KEYS" ZRANGE "zr:__rand_int__" 0 9 WITHSCORES) ;;
  esac
}

# Sum of CARDCMD over PREFIX0..COUNT-1 -> "sum empty_keys", or "NA NA" when a
# reply is not an integer (command missing).
count_elems() {
  local port=$1 cmd=$2 prefix=$3 count=$4
  awk -v c="$cmd" -v p="$prefix" -v n="$count" 'BEGIN { for (i = 0; i < n; i++) printf "%s %s%012d\n", c, p, i }' |
    cli_batch "$port" | tr -d '\r' | awk -v n="$count" '
      /^[0-9]+$/ { s += $1; if ($1 == 0) z++; k++; next } { bad++ }
      END { if (bad || k != n) print "NA NA"; else printf "%d %d\n", s, z }'
}

# Per (test, server): why the test cannot run there (empty: it can).
declare -A UNSUP
declare -A PRELOAD_ERR

# Preload the zrange sorted sets once per server.
preload_zrange() {
  local name=$1 port=${PORTOF[$1]} counts e got
  counts=$(gen_zsets zr: "$ZR_KEYS" "$ZR_MEMBERS" 1000 "m:%012d" | cli_pipe "$port" | tee "$OUT_DIR/preload-zrange-$name.out" | pipe_counts)
  read -r e _ <<<"$counts"
  if [ "$e" != 0 ]; then
    PRELOAD_ERR[$name]="preload ZADD failed: $(pipe_err <"$OUT_DIR/preload-zrange-$name.out")"
    return
  fi
  got=$(count_elems "$port" ZCARD zr: "$ZR_KEYS")
  [ "$got" = "$((ZR_KEYS * ZR_MEMBERS)) 0" ] || PRELOAD_ERR[$name]="preload: ZCARD sum/empty keys '$got', want '$((ZR_KEYS * ZR_MEMBERS)) 0'"
}

# check_test TEST NAME: run the test's command with exact expected replies;
# sets UNSUP[TEST,NAME] when the server does not do it right.
check_test() {
  local t=$1 name=$2 port=${PORTOF[$2]} k="types-sanity:$1" got want
  if [ "$t" = zrange ] && [ -n "${PRELOAD_ERR[$name]:-}" ]; then
    UNSUP[$t,$name]=${PRELOAD_ERR[$name]}
    return
  fi
  cli "$port" DEL "$k" >/dev/null 2>&1
  case "$t" in
    lpush) got=$(printf 'LPUSH %s a\nLPUSH %s b c\n' "$k" "$k" | cli_batch "$port"); want=$'1\n3' ;;
    lpop) got=$(printf 'LPUSH %s a b\nLPOP %s\nLPOP %s\nEXISTS %s\n' "$k" "$k" "$k" "$k" | cli_batch "$port"); want=$'2\nb\na\n0' ;;
    sadd) got=$(printf 'SADD %s a b a\nSADD %s b c\n' "$k" "$k" | cli_batch "$port"); want=$'2\n1' ;;
    hset) got=$(printf 'HSET %s f1 v f2 v\nHSET %s f1 w f3 v\n' "$k" "$k" | cli_batch "$port"); want=$'2\n1' ;;
    zadd) got=$(printf 'ZADD %s 1 a 2 b\nZADD %s 3 a 1 c\n' "$k" "$k" | cli_batch "$port"); want=$'2\n1' ;;
    zrange)
      got=$(printf 'ZRANGE zr:000000000000 0 2 WITHSCORES\n' | cli_batch "$port")
      want=$'m:000000000000\n0\nm:000000000001\n1\nm:000000000002\n2'
      ;;
  esac
  cli "$port" DEL "$k" >/dev/null 2>&1
  got=$(printf '%s\n' "$got" | tr -d '\r' | sed -e '/^$/d')
  [ "$got" = "$want" ] && return 0
  if printf '%s\n' "$got" | grep -q -E '^[A-Z][A-Z_]+ '; then
    UNSUP[$t,$name]=$(printf '%s\n' "$got" | grep -m1 -E '^[A-Z][A-Z_]+ ' | clean_msg)
  else
    UNSUP[$t,$name]="wrong reply: got '$(printf '%s' "$got" | tr '\n' ' ' | clean_msg)' want '$(printf '%s' "$want" | tr '\n' ' ')'"
  fi
}

TESTS=()
for p in $PIPELINES; do
  for t in $TESTNAMES; do TESTS+=("${t}_p$p"); done
done

RESULTS="$OUT_DIR/results.csv"
echo "round,test,server,status,requests,ops_per_sec,p50_ms,p99_ms,wall_s,server_cpu_s,client_cpu_s,cpu_us_per_op,server_cores,client_cores,other_cores,elems_per_key,encoding,note" >"$RESULTS"

now_ns() { date +%s%N; }

# rb OUT PORT N -- runs redis-benchmark with ARGS in the background (so
# INT/TERM reach the script at once); returns its exit status. Its user+sys
# time lands in $TIMES_FILE (`times` of the wrapper bash, second line =
# waited-for children), as in bench/tx.sh.
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

times_to_s() {
  # "0m1.234s 0m0.567s" -> 1.801
  tail -1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] } printf "%.3f", s }'
}

# Last CSV data line: "TEST","rps","avg","min","p50","p95","p99","max".
rb_fields() { grep -v '^"test"' "$1" | tail -1 | tr -d '"' | awk -F, 'NF >= 7 { print $(NF - 6), $(NF - 3), $(NF - 1) }'; }

# rb_verdict OUT RC OPS -> "" when the run is valid, else "unsupported: ..."
# or "failed: ...". redis-benchmark exits on an error reply ("Error from
# server: ..." on stderr); a 0 or missing rate is never a result.
rb_verdict() {
  local out=$1 rc=$2 ops=$3 err
  err=$(grep -m1 -E 'Error from server|[Ee]rror|ERR ' "$out.err" 2>/dev/null | sed -e 's/^Error from server: //' | clean_msg)
  if [ -n "$err" ] && printf '%s' "$err" | grep -q -i 'unknown command'; then
    echo "unsupported: $err"
  elif [ -n "$err" ]; then
    echo "failed: $err"
  elif [ "$rc" = 124 ]; then
    echo "failed: timed out after ${TEST_TIMEOUT}s"
  elif [ "$rc" != 0 ]; then
    echo "failed: redis-benchmark exit status $rc"
  elif [ -z "$ops" ] || ! awk -v o="$ops" 'BEGIN { exit !(o + 0 > 0) }'; then
    echo "failed: no rate (ops/s '${ops}')"
  fi
}

# prepare TEST PORT N: the state every run starts from (unmeasured): the
# test's keys deleted, then BASE elements in each (lpop: enough that every pop
# hits). Sets PREP_ERR (why it failed, empty when it worked) and PRE_SUM
# (elements in the test's keys, counted: what after_run compares with).
PREP_ERR='' PRE_SUM=NA
prepare() {
  local t=$1 port=$2 n=$3 per out e
  PREP_ERR='' PRE_SUM=NA
  [ "$t" = zrange ] && return 0
  out=$(gen_del "$(prefix_of "$t")" "$TYPE_KEYS" | cli_pipe "$port")
  read -r e _ < <(printf '%s\n' "$out" | pipe_counts)
  [ "$e" = 0 ] || { PREP_ERR="reset: $(printf '%s\n' "$out" | pipe_err) ($(printf '%s\n' "$out" | grep -m1 '^errors:' | tr ',' ';'))"; return; }
  if [ "$t" = lpop ]; then
    per=$(awk -v n="$n" -v r="$TYPE_KEYS" 'BEGIN { m = n / r; printf "%d", m + 6 * sqrt(m) + 64 }')
  else
    per=$BASE
  fi
  if [ "$per" -gt 0 ]; then
    out=$(gen_fill "$t" "$(prefix_of "$t")" "$TYPE_KEYS" "$per" | cli_pipe "$port")
    read -r e _ < <(printf '%s\n' "$out" | pipe_counts)
    [ "$e" = 0 ] || { PREP_ERR="fill: $(printf '%s\n' "$out" | pipe_err) ($(printf '%s\n' "$out" | grep -m1 '^errors:' | tr ',' ';'))"; return; }
  fi
  read -r PRE_SUM _ < <(count_elems "$port" "$(card_of "$t")" "$(prefix_of "$t")" "$TYPE_KEYS")
  # Lists need LLEN to check the run; for the other types the count is
  # informational (a server without SCARD/HLEN/ZCARD still gets measured).
  if [ "$PRE_SUM" = NA ] && [ "$t" != lpush ] && [ "$t" != lpop ]; then return 0; fi
  [ "$PRE_SUM" = $((per * TYPE_KEYS)) ] || PREP_ERR="after filling $per elements into each of $TYPE_KEYS keys the $(card_of "$t") sum is $PRE_SUM"
}

# after_run TEST PORT N -> sets POST_ELEMS (elements per key), POST_ENC,
# POST_BAD (why the run is not valid, empty when it is).
POST_ELEMS=NA POST_ENC=NA POST_BAD=
after_run() {
  local t=$1 port=$2 n=$3 sum keys extra
  keys=$(keys_of "$t")
  POST_BAD=
  read -r sum _ < <(count_elems "$port" "$(card_of "$t")" "$(prefix_of "$t")" "$keys")
  POST_ENC=$(encoding_of "$port" "$(prefix_of "$t")000000000000")
  if [ "$sum" = NA ]; then POST_ELEMS=NA; else
    POST_ELEMS=$(awk -v s="$sum" -v k="$keys" 'BEGIN { printf "%.1f", s / k }'); fi
  extra=$((CLIENTS * ${PIPE:-1}))
  case "$t" in
    lpush)
      if [ "$sum" = NA ] || [ "$sum" -lt $((PRE_SUM + n)) ] || [ "$sum" -gt $((PRE_SUM + n + extra)) ]; then
        POST_BAD="LLEN sum $sum after $PRE_SUM + $n LPUSH"
      fi
      ;;
    lpop)
      # Pops that hit = PRE_SUM - left; fewer than n means some missed.
      if [ "$sum" = NA ] || [ $((PRE_SUM - sum)) -lt "$n" ]; then
        POST_BAD="LLEN sum $sum after $n LPOP from $PRE_SUM elements: pops missed"
      fi
      ;;
  esac
}

declare -A NREQ
# Requests of a probe run (also the floor of a measured run).
probe_n() { if [ $(($1 * 2000)) -ge 5000 ]; then echo $(($1 * 2000)); else echo 5000; fi; }

# size_test TEST: probe every server (unmeasured), then one request count for
# all servers: mean probe rate * BENCH_SECONDS (BENCH_REQUESTS if set).
size_test() {
  local tname=$1 base=${1%_p*} pipe=${1##*_p} probe name port out rps rc verdict rates=""
  probe=$(probe_n "$pipe")
  for i in $(seq 0 $((NSRV - 1))); do
    name=${NAMES[$i]}
    [ -z "${UNSUP[$base,$name]:-}" ] || continue
    port=${PORTOF[$name]}
    test_args "$base" "$pipe"
    prepare "$base" "$port" "$probe"
    if [ -n "$PREP_ERR" ]; then
      printf '  probe %-10s %-12s failed: %s\n' "$tname" "$name" "$PREP_ERR"
      continue
    fi
    out="$OUT_DIR/probe-$tname-$name.out"
    rb "$out" "$port" "$probe"
    rc=$?
    rps=
    read -r rps _ _ < <(rb_fields "$out")
    verdict=$(rb_verdict "$out" "$rc" "${rps:-}")
    if [ -n "$verdict" ]; then
      printf '  probe %-10s %-12s %s\n' "$tname" "$name" "$verdict"
      # A missing command stays missing: skip the test there. Other failures
      # are left to the measured runs to report.
      case "$verdict" in unsupported:*) UNSUP[$base,$name]=${verdict#unsupported: } ;; esac
      continue
    fi
    printf '  probe %-10s %-12s %10.0f ops/s\n' "$tname" "$name" "$rps"
    rates="$rates $rps"
  done
  if [ -n "$FIXED_N" ]; then
    NREQ[$tname]=$FIXED_N
  else
    NREQ[$tname]=$(awk -v r="$rates" -v s="$SECONDS_PER_RUN" -v p="$probe" \
      'BEGIN { k = split(r, a, " "); t = 0; for (i = 1; i <= k; i++) t += a[i]; n = k ? int(t / k * s) : p; if (n < p) n = p; print n }')
  fi
  printf '  %-16s -> %s requests per run on every server\n' "$tname" "${NREQ[$tname]}"
}

csv_row() { echo "$1" >>"$RESULTS"; }

run_test() {
  local round=$1 tname=$2 name=$3 base=${2%_p*}
  local port=${PORTOF[$3]} pid=${PID[$3]} n=${NREQ[$2]} log c0 c1 t0 t1 m0 m1 rc ops p50 p99 verdict status note
  PIPE=${2##*_p}
  if [ -n "${UNSUP[$base,$name]:-}" ]; then
    csv_row "$round,$tname,$name,unsupported,$n,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,${UNSUP[$base,$name]}"
    printf '  %-10s %-12s unsupported: %s\n' "$tname" "$name" "${UNSUP[$base,$name]}"
    return
  fi
  test_args "$base" "$PIPE"
  prepare "$base" "$port" "$n"
  if [ -n "$PREP_ERR" ]; then
    csv_row "$round,$tname,$name,failed,$n,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,NA,$PREP_ERR"
    printf '  %-10s %-12s failed: %s\n' "$tname" "$name" "$PREP_ERR"
    return
  fi
  log="$OUT_DIR/$tname-$name-r$round.out"
  m0=$(machine_busy); c0=$(cpu_ticks "$pid"); t0=$(now_ns)
  rb "$log" "$port" "$n"
  rc=$?
  t1=$(now_ns); c1=$(cpu_ticks "$pid"); m1=$(machine_busy)
  ops=; p50=; p99=
  read -r ops p50 p99 < <(rb_fields "$log")
  verdict=$(rb_verdict "$log" "$rc" "${ops:-}")
  status=ok note=
  if [ -n "$verdict" ]; then
    status=${verdict%%:*}; note=${verdict#*: }
    ops=NA; p50=NA; p99=NA
    POST_ELEMS=NA POST_ENC=NA
    [ "$status" = unsupported ] && UNSUP[$base,$name]=$note
  else
    after_run "$base" "$port" "$n"
    if [ -n "$POST_BAD" ]; then status=invalid; note=$POST_BAD; fi
  fi
  local wall srv_s cli_s cpuop srv_cores cli_cores oth_cores
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
  if [ "$c0" = NA ] || [ "$c1" = NA ]; then srv_s=NA; else
    srv_s=$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", (b - a) / hz }'); fi
  if [ -s "$TIMES_FILE" ]; then cli_s=$(times_to_s "$TIMES_FILE"); else cli_s=NA; fi
  cpuop=$(awk -v s="$srv_s" -v n="$n" 'BEGIN { if (s == "NA") print "NA"; else printf "%.3f", s * 1e6 / n }')
  srv_cores=$(awk -v s="$srv_s" -v w="$wall" 'BEGIN { if (s == "NA" || w == 0) print "NA"; else printf "%.2f", s / w }')
  cli_cores=$(awk -v s="$cli_s" -v w="$wall" 'BEGIN { if (s == "NA" || w == 0) print "NA"; else printf "%.2f", s / w }')
  # Busy CPU of the machine minus server and load generator, per wall
  # second: noise from other processes.
  oth_cores=$(awk -v a="$m0" -v b="$m1" -v hz="$CLK_TCK" -v w="$wall" -v s="$srv_s" -v c="$cli_s" 'BEGIN {
    if (w == 0 || s == "NA" || c == "NA") { print "NA"; exit }
    o = ((b - a) / hz - s - c) / w; if (o < 0) o = 0; printf "%.2f", o }')
  csv_row "$round,$tname,$name,$status,$n,$ops,$p50,$p99,$wall,$srv_s,$cli_s,$cpuop,$srv_cores,$cli_cores,$oth_cores,$POST_ELEMS,$POST_ENC,$note"
  if [ "$status" = ok ]; then
    printf '  %-10s %-12s %10s ops/s  p50 %6s  p99 %6s ms  %7s cpu-us/op  cores srv %4s cli %4s other %4s  %s/key %s\n' \
      "$tname" "$name" "$ops" "$p50" "$p99" "$cpuop" "$srv_cores" "$cli_cores" "$oth_cores" "$POST_ELEMS" "$POST_ENC"
  else
    printf '  %-10s %-12s %s: %s\n' "$tname" "$name" "$status" "$note"
  fi
}

# ---------------------------------------------------------------- memory test
MEMRESULTS="$OUT_DIR/memory.csv"
echo "test,server,status,items,elements,rss_empty_kb,rss_loaded_kb,bytes_per_item_rss,bytes_per_element_rss,used_memory_empty,used_memory_loaded,bytes_per_item_used_memory,load_s,encoding,note" >"$MEMRESULTS"

# mem_test TEST INDEX FILE
mem_test() {
  local t=$1 i=$2 file=$3 name=${NAMES[$2]} port pid r0 r1 u0 u1 t0 t1 counts e got want status=ok note="" enc=NA elems
  if [ "$t" = hash ]; then elems=$((MEM_N * 5)); else elems=$MEM_N; fi
  start_server "$i" "mem-$t"
  port=${PORTOF[$name]}; pid=${PID[$name]}
  [ -n "${VERSION[$name]:-}" ] || VERSION[$name]=$(server_version "$port")
  # The type's command, exact replies, before loading anything.
  if [ "$t" = hash ]; then
    got=$(printf 'HSET mem-sanity f1 v f2 1\nDEL mem-sanity\n' | cli_batch "$port")
  else
    got=$(printf 'ZADD mem-sanity 1 a 2 b\nDEL mem-sanity\n' | cli_batch "$port")
  fi
  want=$'2\n1'
  got=$(printf '%s\n' "$got" | tr -d '\r' | sed -e '/^$/d')
  if [ "$got" != "$want" ]; then
    status=unsupported
    note=$(printf '%s\n' "$got" | grep -m1 -E '^[A-Z][A-Z_]+ ' | clean_msg)
    [ -n "$note" ] || note="wrong reply '$(printf '%s' "$got" | tr '\n' ' ' | clean_msg)' want '2 1'"
    stop_pid "$pid"
    echo "$t,$name,$status,$MEM_N,$elems,NA,NA,NA,NA,NA,NA,NA,NA,NA,$note" >>"$MEMRESULTS"
    printf '  %-6s %-12s unsupported: %s\n' "$t" "$name" "$note"
    return
  fi
  sleep 1
  r0=$(rss_kb "$pid"); u0=$(used_memory "$port")
  t0=$(now_ns)
  counts=$(cli_pipe "$port" <"$file" | tee "$OUT_DIR/memload-$t-$name.out" | pipe_counts)
  t1=$(now_ns)
  read -r e _ <<<"$counts"
  if [ "$e" != 0 ]; then
    status=failed
    note="load: $(pipe_err <"$OUT_DIR/memload-$t-$name.out") (errors/replies: $counts)"
  fi
  sleep 1
  r1=$(rss_kb "$pid"); u1=$(used_memory "$port")
  if [ "$status" = ok ]; then
    if [ "$t" = hash ]; then
      got=$(printf 'DBSIZE\nHLEN hash:0000000\n' | cli_batch "$port" | tr -d '\r' | tr '\n' ' ')
      want="$MEM_N 5 "
      enc=$(encoding_of "$port" hash:0000000)
    else
      got=$(printf 'ZCARD bigzset\n' | cli_batch "$port" | tr -d '\r' | tr '\n' ' ')
      want="$MEM_N "
      enc=$(encoding_of "$port" bigzset)
    fi
    if [ "$got" != "$want" ]; then status=invalid; note="after load: got '$got' want '$want'"; fi
  fi
  stop_pid "$pid"
  awk -v t="$t" -v nm="$name" -v st="$status" -v n="$MEM_N" -v el="$elems" -v r0="$r0" -v r1="$r1" \
    -v u0="$u0" -v u1="$u1" -v t0="$t0" -v t1="$t1" -v enc="$enc" -v note="$note" 'BEGIN {
    ok = (st == "ok" && r0 != "NA" && r1 != "NA")
    bi = ok ? sprintf("%.1f", (r1 - r0) * 1024 / n) : "NA"
    be = ok ? sprintf("%.1f", (r1 - r0) * 1024 / el) : "NA"
    bu = (st == "ok" && u0 != "NA" && u1 != "NA") ? sprintf("%.1f", (u1 - u0) / n) : "NA"
    printf "%s,%s,%s,%d,%d,%s,%s,%s,%s,%s,%s,%s,%.2f,%s,%s\n", t, nm, st, n, el, r0, r1, bi, be, u0, u1, bu, (t1 - t0) / 1e9, enc, note
  }' >>"$MEMRESULTS"
  tail -1 "$MEMRESULTS" | awk -F, '{
    if ($3 == "ok") printf "  %-6s %-12s rss %s -> %s kB: %s bytes/item, %s bytes/element (rss); %s bytes/item (used_memory); load %s s; %s\n", $1, $2, $6, $7, $8, $9, $12, $13, $14
    else printf "  %-6s %-12s %s: %s\n", $1, $2, $3, $15 }'
}

# ---------------------------------------------------------------- main
T_START=$(date +%s)
{
  echo "# bench/types.sh run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo); git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- crates src 2>/dev/null || echo ' (+ uncommitted changes)')"
  [ -n "$BIN" ] && echo "tessera binary: $BIN (built $(date -r "$BIN" '+%Y-%m-%d %H:%M:%S'))"
  echo "load generator: $("$RB" --version 2>/dev/null | head -1); clients=$CLIENTS; keys per write test=$TYPE_KEYS x $BASE base elements; zrange: $ZR_KEYS x $ZR_MEMBERS members; value=$VALSIZE B; rounds=$ROUNDS; $([ -n "$FIXED_N" ] && echo "requests=$FIXED_N" || echo "~${SECONDS_PER_RUN}s per run"); memory N=$MEM_N"
  echo "client pinning: ${BENCH_CLIENT_CPUS:-none}; server pinning: ${BENCH_SERVER_CPUS:-none}"
} >"$OUT_DIR/header.txt"
cat "$OUT_DIR/header.txt"

declare -A VERSION
if [ ${#TESTS[@]} -gt 0 ]; then
  echo "== starting servers, preloading $ZR_KEYS sorted sets of $ZR_MEMBERS members, checking commands"
  for i in $(seq 0 $((NSRV - 1))); do
    name=${NAMES[$i]}
    start_server "$i"
    VERSION[$name]=$(server_version "${PORTOF[$name]}")
    echo "  $name: pid ${PID[$name]} port ${PORTOF[$name]} (${VERSION[$name]})"
    echo "  $name: ${CMDS[$i]}" >>"$OUT_DIR/header.txt"
    case " $TESTNAMES " in *" zrange "*) preload_zrange "$name" ;; esac
    for t in $TESTNAMES; do
      check_test "$t" "$name"
      [ -z "${UNSUP[$t,$name]:-}" ] || echo "  $name: $t unsupported: ${UNSUP[$t,$name]}"
    done
  done

  echo "== probes (unmeasured warm-up; one request count per test for all servers)"
  for t in "${TESTS[@]}"; do size_test "$t"; done

  for round in $(seq 1 "$ROUNDS"); do
    echo "== round $round/$ROUNDS"
    for t in "${TESTS[@]}"; do
      for j in $(seq 0 $((NSRV - 1))); do
        run_test "$round" "$t" "${NAMES[$(((round - 1 + j) % NSRV))]}"
      done
    done
  done
  for i in $(seq 0 $((NSRV - 1))); do stop_pid "${PID[${NAMES[$i]}]}"; done
fi

if [ "$MEM_N" -gt 0 ] && [ -n "$MEM_TESTS" ]; then
  for t in $MEM_TESTS; do
    MEMFILE="$OUT_DIR/.mem-$t.resp"
    if [ "$t" = hash ]; then
      echo "== memory: $MEM_N hashes of 5 fields, fresh server each"
      gen_hashes "$MEM_N" >"$MEMFILE"
    else
      echo "== memory: one sorted set of $MEM_N members, fresh server each"
      gen_zsets bigzset 0 "$MEM_N" "$MEM_BATCH" "member:%07d" >"$MEMFILE"
    fi
    for i in $(seq 0 $((NSRV - 1))); do
      mem_test "$t" "$i" "$MEMFILE"
      grep -q "^  ${NAMES[$i]}: " "$OUT_DIR/header.txt" || echo "  ${NAMES[$i]}: ${CMDS[$i]}" >>"$OUT_DIR/header.txt"
    done
    rm -f "$MEMFILE"
  done
fi
rm -f "$TIMES_FILE"

REPORT="$OUT_DIR/report.md"
{
  cat "$OUT_DIR/header.txt"
  echo
  echo "Servers:"
  for i in $(seq 0 $((NSRV - 1))); do echo "- ${NAMES[$i]}: ${VERSION[${NAMES[$i]}]:-}"; done
  if [ ${#TESTS[@]} -gt 0 ]; then
    echo
    echo "## Throughput"
    echo
    echo "Median over $ROUNDS round(s); every server runs the same request count per test. Write"
    echo "runs start from R keys of $BASE elements each (lpop: lists pre-filled so every pop hits)."
    echo "Workloads (R = $TYPE_KEYS, each __rand_int__ its own random number in 0..R-1; V = $VALSIZE bytes):"
    echo
    echo "| test | command |"
    echo "|---|---|"
    echo "| lpush | \`LPUSH list:__rand_int__ V\` |"
    echo "| lpop | \`LPOP plist:__rand_int__\` |"
    echo "| sadd | \`SADD set:__rand_int__ m:__rand_int__\` |"
    echo "| hset | \`HSET hash:__rand_int__ f:__rand_int__ V\` |"
    echo "| zadd | \`ZADD zset:__rand_int__ __rand_int__ m:__rand_int__\` |"
    echo "| zrange | \`ZRANGE zr:__rand_int__ 0 9 WITHSCORES\` ($ZR_KEYS sets of $ZR_MEMBERS members, -r $ZR_KEYS) |"
    echo
    echo "Target: ops/s at least ${NAMES[0]}'s (ratio as printed >= 1.00). cpu-us/op = server CPU"
    echo "(utime+stime) per op, lower is better. With the same server on both sides the ratios"
    echo "scatter around 1.00 by the run-to-run noise (spread and other cores columns below)."
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
      # What to print instead of a number when a (test, server) has no valid run.
      function why(k) { return (k in ST) ? ST[k] : "NA" }
      function cell(f, k, what) { v = get(k SUBSEP what); return (v == "NA") ? why(k) : fmt(f, v) }
      NR == 1 { next }
      {
        key = $2 SUBSEP $3
        if (!($2 in seen)) { seen[$2] = 1; tests[++nt] = $2 }
        if ($4 != "ok") {
          if (!(key in ST)) ST[key] = $4
          tb = $2; sub(/_p[0-9]+$/, "", tb)
          if ($18 != "" && !(($3 SUBSEP tb SUBSEP $4 SUBSEP $18) in noted)) { noted[$3 SUBSEP tb SUBSEP $4 SUBSEP $18] = 1; notes[++nn] = $3 ": " $2 " " $4 ": " $18 }
          next
        }
        add(key SUBSEP "ops", $6); add(key SUBSEP "p50", $7); add(key SUBSEP "p99", $8)
        add(key SUBSEP "cpu", $12); add(key SUBSEP "sc", $13); add(key SUBSEP "cc", $14); add(key SUBSEP "oc", $15)
        add(key SUBSEP "el", $16); if ($17 != "NA") ENC[key] = $17
        if ($15 != "NA" && $15 + 0 > maxoc) maxoc = $15 + 0
      }
      END {
        ns = split(order, srv, " ")
        for (s = 2; s <= ns; s++) {
          met = 0; cnt = 0; miss = ""
          printf "\n### %s vs %s\n\n", srv[s], srv[1]
          print "| test | " srv[s] " ops/s | " srv[1] " ops/s | ratio | " srv[s] " cpu-us/op | " srv[1] " cpu-us/op | cpu/op ratio | target |"
          print "|---|---:|---:|---:|---:|---:|---:|---|"
          for (t = 1; t <= nt; t++) {
            a = tests[t] SUBSEP srv[s]; b = tests[t] SUBSEP srv[1]
            r = ratio(get(a SUBSEP "ops"), get(b SUBSEP "ops"))
            tg = (r == "NA") ? "-" : (r + 0 >= 1 ? "met" : "NOT met")
            cnt++; if (tg == "met") met++; else miss = miss " " tests[t]
            printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", tests[t], cell("%.0f", a, "ops"), cell("%.0f", b, "ops"), r,
              cell("%.3f", a, "cpu"), cell("%.3f", b, "cpu"), ratio(get(a SUBSEP "cpu"), get(b SUBSEP "cpu")), tg
          }
          printf "\nTarget (throughput >= %s): met in %d of %d tests.%s\n", srv[1], met, cnt, (miss != "") ? " Not met or not measured:" miss "." : ""
        }
        print "\n### All servers\n"
        print "Ratios against " srv[1] "; spread = (max - min) / median of ops/s over rounds; p50/p99 from"
        print "redis-benchmark; srv cores = server CPU / wall; cli cores = redis-benchmark CPU / wall (near"
        print "1.00: the single-threaded client is the bottleneck, and ops/s measures it more than the"
        print "server; compare cpu-us/op then); other cores = CPU the rest of the machine used during the"
        print "run (noise); elems/key and encoding (OBJECT ENCODING of key 0) after the run.\n"
        print "| test | server | ops/s | spread | p50 ms | p99 ms | cpu-us/op | srv cores | cli cores | other cores | ops/s vs " srv[1] " | cpu/op vs " srv[1] " | elems/key | encoding |"
        print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        for (t = 1; t <= nt; t++) {
          b = tests[t] SUBSEP srv[1]
          for (s = 1; s <= ns; s++) {
            k = tests[t] SUBSEP srv[s]
            ops = get(k SUBSEP "ops")
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", tests[t], srv[s],
              cell("%.0f", k, "ops"), (k SUBSEP "ops" in L) ? spread(L[k SUBSEP "ops"]) : "-",
              fmt("%.3f", get(k SUBSEP "p50")), fmt("%.3f", get(k SUBSEP "p99")), fmt("%.3f", get(k SUBSEP "cpu")),
              fmt("%.2f", get(k SUBSEP "sc")), fmt("%.2f", get(k SUBSEP "cc")), fmt("%.2f", get(k SUBSEP "oc")),
              ratio(ops, get(b SUBSEP "ops")), ratio(get(k SUBSEP "cpu"), get(b SUBSEP "cpu")),
              fmt("%.1f", get(k SUBSEP "el")), (k in ENC) ? ENC[k] : "NA"
          }
        }
        if (nn) {
          print "\nRuns without a valid result:\n"
          for (i = 1; i <= nn; i++) print "- " notes[i]
        }
        if (maxoc > 0.25)
          printf "\nNOISY: other processes used up to %.2f cores during a run (other cores column); on a\n2-core machine treat the ratios as rough, or rerun when the machine is idle.\n", maxoc
      }' "$RESULTS"
  fi
  if [ "$(wc -l <"$MEMRESULTS")" -gt 1 ]; then
    echo
    echo "## Memory per element"
    echo
    echo "Fresh server per test and server, loaded with redis-cli --pipe; bytes = (VmRSS loaded - VmRSS"
    echo "empty) / count. hash: $MEM_N x HSET hash:NNNNNNN field1..field3 <8-byte string> field4"
    echo "<int 0..99999> field5 <int 0..99> (item = hash, element = field). zset: one key, $MEM_N x"
    echo "member:NNNNNNN with integer score, $MEM_BATCH per ZADD (item = element = member). used_memory:"
    echo "INFO's figure where the server has one (Tessera's is its RSS: compare the RSS columns)."
    echo "Target: bytes per element at most ${NAMES[0]}'s (ratio as printed <= 1.00)."
    echo
    echo "| test | server | RSS empty MiB | RSS loaded MiB | bytes/item (RSS) | bytes/element (RSS) | bytes/item (used_memory) | vs ${NAMES[0]} (RSS) | target | encoding | load s |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|"
    awk -F, -v base="${NAMES[0]}" '
      NR == 1 { next }
      { row[NR] = $0; if ($2 == base && $3 == "ok") B[$1] = $8 }
      END {
        for (i = 2; i <= NR; i++) {
          split(row[i], f, ",")
          if (f[3] != "ok") {
            printf "| %s | %s | %s: %s | | | | | | - | | |\n", f[1], f[2], f[3], f[15]
            if (f[2] != base) { cnt++; notmet = notmet " " f[1] "/" f[2] }
            continue
          }
          r = (f[1] in B && B[f[1]] > 0) ? sprintf("%.2f", f[8] / B[f[1]]) : "NA"
          tg = (f[2] == base) ? "-" : (r == "NA" ? "-" : (r + 0 <= 1 ? "met" : "NOT met"))
          if (f[2] != base) { cnt++; if (tg == "met") met++; else notmet = notmet " " f[1] "/" f[2] }
          printf "| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[6] / 1024, f[7] / 1024,
            f[8], f[9], f[12], r, tg, f[14], f[13]
        }
        if (cnt || notmet != "")
          printf "\nTarget (memory per element <= %s): met in %d of %d.%s\n", base, met, cnt + 0, (notmet != "") ? " Not met or not measured:" notmet "." : ""
      }' "$MEMRESULTS"
  fi
  echo
  echo "Total wall time: $(($(date +%s) - T_START)) s. Raw data: $RESULTS, $MEMRESULTS."
} >"$REPORT"

echo
cat "$REPORT"
