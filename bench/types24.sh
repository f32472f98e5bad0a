#!/usr/bin/env bash
# bench/types24.sh — streams, HyperLogLog, bitmaps and GEO (issue 24):
# Tessera next to Redis 7 in one run, as ratios of server CPU per op, then
# throughput, then memory per stream entry and per HyperLogLog.
#
#   bench/types24.sh
#
# 1. CPU per op and throughput: redis-benchmark, 50 clients, pipeline 1 and
#    16 (every __rand_int__ is its own random 12-digit number in 0..R-1):
#
#   xadd        XADD xs:__rand_int__ * f v                         -r 1000
#   xreadgroup  XREADGROUP GROUP g c COUNT 10 STREAMS xr:__rand_int__ >   -r 100
#               (before every run: 100 streams holding enough entries
#               that every read gets 10 new ones, group g created at 0;
#               checked afterwards: the PELs hold >= 10 x requests)
#   pfadd       PFADD hll:__rand_int__ e:__rand_int__:__rand_int__  -r 1000
#               (keys start empty each run: sparse, growing)
#   pfcount10   PFCOUNT hc:__rand_int__ x 10                        -r 100
#               (100 HLLs of 5000 elements each, dense, loaded once)
#   setbit      SETBIT bm:__rand_int__ 77777 1                      -r 1000
#               (redis-benchmark's zero-padded numbers are no bit offsets
#               to Redis, so the offset is fixed; 10 KB strings)
#   bitcount    BITCOUNT bc:__rand_int__                            -r 4
#               (4 strings of 1 MiB of random bytes, loaded once)
#   geosearch   GEOSEARCH geo FROMMEMBER m:__rand_int__ BYRADIUS 10 km ASC COUNT 10
#               -r 100000 (one key of 100k members spread over a 10x10
#               degree box around 5E 45N: ~40 members within 10 km)
#
#    Per test: one unmeasured probe per server sizes the runs (mean probe
#    rate x BENCH_SECONDS, the same request count for every server), then
#    BENCH_ROUNDS rounds, the server order alternating. Reported: medians
#    over rounds of server CPU (utime+stime of every thread, /proc/PID/stat,
#    10 ms ticks) per op in microseconds, and ops/s; with the spread
#    (max-min)/median of the CPU figure, and the CPU the rest of the
#    machine used during the run ("rest cores": redis-benchmark, up to
#    one core, plus noise from other work).
#
# 2. Memory (fresh server per test, loaded with redis-cli --pipe):
#   stream      1M x XADD mstream * f v<7 digits>             -> bytes/entry
#   hll-sparse  100k x PFADD hs:N e1..e10 (sparse, ~30 bytes)  -> bytes/HLL
#   hll-dense   10k x PFADD hd:N e1..e10 + PFDEBUG TODENSE     -> bytes/HLL
#   bytes = used_memory delta / items (INFO memory; Tessera's is its
#   counting allocator's figure), RSS delta / items beside it.
#
# Env: BENCH_ROUNDS (2), BENCH_SECONDS (2), BENCH_PIPELINES ("1 16"),
#      BENCH_TESTS (subset of the tests above; empty: none),
#      BENCH_MEM (1; 0 skips memory), BENCH_MEM_SCALE (1: multiplies the
#      memory counts), BENCH_XRG_MAX (300000: cap on xreadgroup requests,
#      each costs 10 preloaded entries), TESSERA_BENCH_BIN,
#      BENCH_SKIP_BUILD=1, OUT_DIR (./bench-results/types24-<time>).
# Measurements, never pass/fail: on 2 cores redis-benchmark competes with
# the server, so compare CPU per op first. Only PIDs started here are
# signalled.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
die() { echo "types24.sh: $*" >&2; exit 1; }

ROUNDS=${BENCH_ROUNDS:-2}
SECS=${BENCH_SECONDS:-2}
PIPELINES=${BENCH_PIPELINES:-1 16}
TESTNAMES=${BENCH_TESTS-xadd xreadgroup pfadd pfcount10 setbit bitcount geosearch}
MEM=${BENCH_MEM:-1}
MEM_SCALE=${BENCH_MEM_SCALE:-1}
XRG_MAX=${BENCH_XRG_MAX:-300000}
CLIENTS=50
OUT_DIR=${OUT_DIR:-./bench-results/types24-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
HZ=$(getconf CLK_TCK)
for b in redis-server redis-cli redis-benchmark awk python3; do
  command -v "$b" >/dev/null || die "'$b' not found"
done

BIN=${TESSERA_BENCH_BIN:-target/release/tessera}
if [ -z "${TESSERA_BENCH_BIN:-}" ] && [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q || die "cargo build --release failed"
fi
[ -x "$BIN" ] || die "$BIN is not an executable"

NAMES=(redis tessera)
declare -A CMD=(
  [redis]="redis-server --bind 127.0.0.1 --port \$PORT --save '' --appendonly no"
  [tessera]="$(printf '%q' "$BIN") --bind 127.0.0.1 --port \$PORT --save ''"
)
declare -A PID PORT LIVE

cpu_ticks() { local s; s=$(cat "/proc/$1/stat") || { echo 0; return; }; s=${s##*) }; set -- $s; echo $((${12} + ${13})); }
machine_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cli() { timeout 60 redis-cli -h 127.0.0.1 -p "$@"; }
used_memory() { cli "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
# RESP on stdin; prints the error count (redis-cli --pipe's summary).
load() {
  timeout 600 redis-cli -h 127.0.0.1 -p "$1" --pipe 2>&1 | tee -a "$OUT_DIR/load.log" |
    awk '/^errors: / { gsub(",", ""); print $2; f = 1 } END { if (!f) print "NA" }'
}

start() { # name [tag]
  local name=$1 port pid
  port=$(free_port)
  bash -c "exec ${CMD[$name]//\$PORT/$port}" >"$OUT_DIR/server-$name${2:+-$2}.log" 2>&1 &
  pid=$!
  LIVE[$pid]=1
  for _ in $(seq 200); do
    [ "$(cli "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.05
  done
  [ "$(cli "$port" PING 2>/dev/null)" = PONG ] || die "$name did not start (see $OUT_DIR)"
  PID[$name]=$pid
  PORT[$name]=$port
}
stop() {
  local pid=${PID[$1]}
  [ -n "${LIVE[$pid]:-}" ] || return 0
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "LIVE[$pid]"
}
cleanup() { local p; for p in "${!LIVE[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- generators
resp() { # one command per line of words on stdin -> RESP
  awk '{ printf "*%d\r\n", NF; for (i = 1; i <= NF; i++) printf "$%d\r\n%s\r\n", length($i), $i }'
}
gen_xr() { # n entries per key into xr:0..99 (keys as redis-benchmark names them)
  awk -v n="$1" 'BEGIN { for (k = 0; k < 100; k++) { key = sprintf("xr:%012d", k)
    for (i = 0; i < n; i++) print "XADD", key, "*", "f", "v" i % 1000
    print "XGROUP", "CREATE", key, "g", "0" } }' | resp
}
gen_hc() { # 100 dense HLLs of 5000 elements, 500 per PFADD
  awk 'BEGIN { for (k = 0; k < 100; k++) for (j = 0; j < 5000; j += 500) {
    printf "PFADD hc:%012d", k; for (i = j; i < j + 500; i++) printf " %d:%d", k, i; print "" } }' | resp
}
gen_geo() { # 100k members m:NNNNNNNNNNNN in [0,10] x [40,50] degrees
  awk 'BEGIN { srand(24); for (j = 0; j < 100000; j += 500) {
    printf "GEOADD geo"; for (i = j; i < j + 500; i++) printf " %.6f %.6f m:%012d", rand() * 10, 40 + rand() * 10, i; print "" } }' | resp
}

# ---------------------------------------------------------------- tests
ARGS=()
test_args() { # test pipeline
  local keys10="" i
  ARGS=(-P "$2")
  case "$1" in
    xadd) ARGS+=(-r 1000 XADD "xs:__rand_int__" "*" f v) ;;
    xreadgroup) ARGS+=(-r 100 XREADGROUP GROUP g c COUNT 10 STREAMS "xr:__rand_int__" ">") ;;
    pfadd) ARGS+=(-r 1000 PFADD "hll:__rand_int__" "e:__rand_int__:__rand_int__") ;;
    pfcount10) ARGS+=(-r 100 PFCOUNT); for i in $(seq 10); do ARGS+=("hc:__rand_int__"); done ;;
    setbit) ARGS+=(-r 1000 SETBIT "bm:__rand_int__" 77777 1) ;;
    bitcount) ARGS+=(-r 4 BITCOUNT "bc:__rand_int__") ;;
    geosearch) ARGS+=(-r 100000 GEOSEARCH geo FROMMEMBER "m:__rand_int__" BYRADIUS 10 km ASC COUNT 10) ;;
  esac
}

# Loaded once per server: the read tests' data.
preload() {
  local port=${PORT[$1]} e k
  cli "$port" FLUSHALL >/dev/null
  e=$(gen_hc | load "$port"); [ "$e" = 0 ] || die "$1: PFADD preload: $e errors"
  e=$(gen_geo | load "$port"); [ "$e" = 0 ] || die "$1: GEOADD preload: $e errors"
  for k in 0 1 2 3; do
    head -c 1048576 /dev/urandom >"$OUT_DIR/.bc"
    cli "$port" -x SET "bc:$(printf %012d $k)" <"$OUT_DIR/.bc" >/dev/null
  done
  rm -f "$OUT_DIR/.bc"
  [ "$(cli "$port" ZCARD geo)" = 100000 ] || die "$1: geo preload"
  [ "$(cli "$port" STRLEN bc:000000000003)" = 1048576 ] || die "$1: bitcount preload"
  # Same answers on both servers for what the tests read.
  cli "$port" PFCOUNT hc:000000000000 hc:000000000001 >"$OUT_DIR/check-$1.txt"
  cli "$port" GEOSEARCH geo FROMMEMBER m:000000000007 BYRADIUS 10 km ASC COUNT 10 >>"$OUT_DIR/check-$1.txt"
}

# Before every run of a write test (unmeasured).
prepare() { # test server requests
  local port=${PORT[$2]} per e
  case "$1" in
    xadd) cli "$port" DEL $(printf 'xs:%012d ' $(seq 0 999)) >/dev/null ;;
    pfadd) cli "$port" DEL $(printf 'hll:%012d ' $(seq 0 999)) >/dev/null ;;
    setbit) cli "$port" DEL $(printf 'bm:%012d ' $(seq 0 999)) >/dev/null ;;
    xreadgroup)
      cli "$port" DEL $(printf 'xr:%012d ' $(seq 0 99)) >/dev/null
      # Reads per key r = requests / 100 on average, random: 10 x (r +
      # 6 sqrt(r) + 10) entries each leave every read 10 to deliver.
      per=$(awk -v n="$3" 'BEGIN { r = n / 100; print int(10 * (r + 6 * sqrt(r) + 10)) }')
      e=$(gen_xr "$per" | load "$port")
      [ "$e" = 0 ] || die "$2: stream preload: $e errors"
      ;;
  esac
}

# After a run: "" if it did what it should, else why not.
verify() { # test server requests
  local port=${PORT[$2]} pel
  case "$1" in
    xreadgroup)
      pel=$(for k in $(seq 0 99); do cli "$port" XPENDING "$(printf 'xr:%012d' "$k")" g | head -1; done | awk '{ s += $1 } END { print s + 0 }')
      [ "$pel" -ge $(($3 * 10)) ] || echo "PELs hold $pel entries, want >= $(($3 * 10)) (a read came back short)"
      ;;
  esac
}

# run test pipeline server requests -> "cpu_us_per_op ops_per_s other_cores"
run() {
  local t=$1 p=$2 name=$3 n=$4 pid=${PID[$3]} c0 c1 m0 m1 t0 t1 out rps bad
  test_args "$t" "$p"
  prepare "$t" "$name" "$n"
  out="$OUT_DIR/rb-$t-p$p-$name.csv"
  m0=$(machine_busy); c0=$(cpu_ticks "$pid"); t0=$(date +%s%N)
  timeout 300 redis-benchmark -h 127.0.0.1 -p "${PORT[$name]}" -c "$CLIENTS" -n "$n" --csv "${ARGS[@]}" >"$out" 2>&1
  t1=$(date +%s%N); c1=$(cpu_ticks "$pid"); m1=$(machine_busy)
  if grep -q -i "error" "$out"; then echo "FAILED $(grep -m1 -i error "$out" | tr ',' ' ')"; return; fi
  bad=$(verify "$t" "$name" "$n")
  [ -z "$bad" ] || { echo "FAILED $bad"; return; }
  rps=$(awk -F'"' 'NR == 2 { print $4 }' "$out")
  # The machine's busy time minus the server's: redis-benchmark (up to a
  # core) and whatever else ran.
  awk -v c=$((c1 - c0)) -v m=$((m1 - m0)) -v hz="$HZ" -v n="$n" -v rps="$rps" -v w=$((t1 - t0)) 'BEGIN {
    wall = w / 1e9; srv = c / hz; busy = m / hz
    printf "%.3f %.0f %.2f\n", srv * 1e6 / n, rps, (busy - srv) / wall }'
}

RES="$OUT_DIR/results.csv"
echo "test,round,server,requests,cpu_us_per_op,ops_per_s,rest_cores" >"$RES"
{
  echo "# bench/types24.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(nproc) CPUs; git $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src || echo ' + changes'); $(redis-server --version | awk '{print $3}'); rounds=$ROUNDS, ~${SECS}s per run, $CLIENTS clients"
} >"$OUT_DIR/header.txt"
cat "$OUT_DIR/header.txt"

if [ -n "$TESTNAMES" ]; then
  for s in "${NAMES[@]}"; do
    start "$s"
    echo "== $s: preloading (pid ${PID[$s]}, port ${PORT[$s]})"
    preload "$s"
  done
  cmp -s "$OUT_DIR/check-redis.txt" "$OUT_DIR/check-tessera.txt" ||
    echo "  !! PFCOUNT/GEOSEARCH answers differ between servers (see $OUT_DIR/check-*.txt)"
  for p in $PIPELINES; do
    for t in $TESTNAMES; do
      # Probe: a short run on each server; n = mean rate x SECS.
      rate=0
      for s in "${NAMES[@]}"; do
        r=$(run "$t" "$p" "$s" 20000)
        case "$r" in FAILED*) echo "  $t p$p $s probe $r"; r="0 0 0" ;; esac
        rate=$(awk -v a="$rate" -v b="$(echo "$r" | awk '{print $2}')" 'BEGIN { print a + b / 2 }')
      done
      n=$(awk -v r="$rate" -v s="$SECS" 'BEGIN { n = int(r * s); print (n < 20000) ? 20000 : n }')
      [ "$t" != xreadgroup ] || [ "$n" -le "$XRG_MAX" ] || n=$XRG_MAX
      for round in $(seq "$ROUNDS"); do
        order=("${NAMES[@]}")
        [ $((round % 2)) = 0 ] && order=(tessera redis)
        for s in "${order[@]}"; do
          r=$(run "$t" "$p" "$s" "$n")
          echo "  $t p$p round $round $s: $r"
          case "$r" in FAILED*) ;; *) echo "${t}_p$p,$round,$s,$n,${r// /,}" >>"$RES" ;; esac
        done
      done
    done
  done
  for s in "${NAMES[@]}"; do stop "$s"; done
fi

# ---------------------------------------------------------------- memory
MRES="$OUT_DIR/memory.csv"
echo "test,server,items,used_delta,rss_delta_kb,bytes_per_item_used,bytes_per_item_rss,encoding" >"$MRES"
mem_test() { # test items generator...
  local t=$1 n=$2 s port u0 u1 r0 r1 e enc
  shift 2
  "$@" >"$OUT_DIR/.mem.resp"
  for s in "${NAMES[@]}"; do
    start "$s" "mem-$t"
    port=${PORT[$s]}
    sleep 0.5
    u0=$(used_memory "$port"); r0=$(rss_kb "${PID[$s]}")
    e=$(load "$port" <"$OUT_DIR/.mem.resp")
    [ "$e" = 0 ] || echo "  !! $t $s: $e load errors"
    sleep 0.5
    u1=$(used_memory "$port"); r1=$(rss_kb "${PID[$s]}")
    case "$t" in
      stream) enc="$(cli "$port" XLEN mstream) entries" ;;
      hll-sparse) enc=$(cli "$port" PFDEBUG ENCODING hs:0) ;;
      hll-dense) enc=$(cli "$port" PFDEBUG ENCODING hd:0) ;;
    esac
    stop "$s"
    awk -v t="$t" -v s="$s" -v n="$n" -v u0="$u0" -v u1="$u1" -v r0="$r0" -v r1="$r1" -v enc="$enc" 'BEGIN {
      printf "%s,%s,%d,%d,%d,%.1f,%.1f,%s\n", t, s, n, u1 - u0, r1 - r0, (u1 - u0) / n, (r1 - r0) * 1024 / n, enc }' | tee -a "$MRES"
  done
  rm -f "$OUT_DIR/.mem.resp"
}
gen_mstream() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "XADD mstream * f v%07d\n", i }' | resp; }
gen_hs() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) { printf "PFADD hs:%d", i; for (j = 0; j < 10; j++) printf " %d:%d", i, j; print "" } }' | resp; }
gen_hd() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) { printf "PFADD hd:%d", i; for (j = 0; j < 10; j++) printf " %d:%d", i, j; print ""; printf "PFDEBUG TODENSE hd:%d\n", i } }' | resp; }
if [ "$MEM" = 1 ]; then
  echo "== memory"
  ns=$(awk -v s="$MEM_SCALE" 'BEGIN { print int(1000000 * s) }')
  nh=$(awk -v s="$MEM_SCALE" 'BEGIN { print int(100000 * s) }')
  nd=$(awk -v s="$MEM_SCALE" 'BEGIN { print int(10000 * s) }')
  mem_test stream "$ns" gen_mstream "$ns"
  mem_test hll-sparse "$nh" gen_hs "$nh"
  mem_test hll-dense "$nd" gen_hd "$nd"
fi

# ---------------------------------------------------------------- report
REPORT="$OUT_DIR/report.md"
{
  cat "$OUT_DIR/header.txt"
  echo
  echo "| test | tessera cpu-us/op | redis cpu-us/op | cpu ratio | spread T / R | tessera ops/s | redis ops/s | ops ratio | rest cores (max) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -F, '
    function med(l,   a, n, i, j, x) { n = split(l, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { x = a[i]; a[i] = a[j]; a[j] = x }
      return n ? ((n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : "NA" }
    function spr(l,   a, n, i, lo, hi, m) { n = split(l, a, " "); if (n < 2) return "-"; lo = hi = a[1] + 0
      for (i = 2; i <= n; i++) { if (a[i] + 0 < lo) lo = a[i] + 0; if (a[i] + 0 > hi) hi = a[i] + 0 }
      m = med(l); return m > 0 ? sprintf("%.0f%%", (hi - lo) * 100 / m) : "-" }
    NR == 1 { next }
    { if (!($1 in seen)) { seen[$1] = 1; T[++nt] = $1 }
      C[$1, $3] = C[$1, $3] " " $5; O[$1, $3] = O[$1, $3] " " $6; if ($7 + 0 > OC[$1]) OC[$1] = $7 + 0 }
    END { for (i = 1; i <= nt; i++) { t = T[i]
      ct = med(C[t, "tessera"]); cr = med(C[t, "redis"]); ot = med(O[t, "tessera"]); or = med(O[t, "redis"])
      printf "| %s | %.3f | %.3f | %s | %s / %s | %.0f | %.0f | %s | %.2f |\n", t, ct, cr, (cr > 0 && ct != "NA") ? sprintf("%.2f", ct / cr) : "NA",
        spr(C[t, "tessera"]), spr(C[t, "redis"]), ot, or, (or > 0 && ot != "NA") ? sprintf("%.2f", ot / or) : "NA", OC[t] } }' "$RES"
  if [ "$(wc -l <"$MRES")" -gt 1 ]; then
    echo
    echo "| memory test | items | tessera B/item (used_memory) | redis B/item | ratio | tessera B/item (RSS) | redis B/item (RSS) | encoding T / R |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    awk -F, 'NR > 1 { U[$1, $2] = $6; R[$1, $2] = $7; E[$1, $2] = $8; N[$1] = $3; if (!($1 in s)) { s[$1] = 1; T[++n] = $1 } }
      END { for (i = 1; i <= n; i++) { t = T[i]
        printf "| %s | %d | %s | %s | %s | %s | %s | %s / %s |\n", t, N[t], U[t, "tessera"], U[t, "redis"],
          (U[t, "redis"] > 0) ? sprintf("%.2f", U[t, "tessera"] / U[t, "redis"]) : "NA", R[t, "tessera"], R[t, "redis"], E[t, "tessera"], E[t, "redis"] } }' "$MRES"
  fi
} >"$REPORT"
echo
cat "$REPORT"
