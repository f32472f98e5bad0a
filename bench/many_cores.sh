#!/usr/bin/env bash
# bench/many_cores.sh — how Tessera's cost per operation grows with the
# number of shards (issue 27), side by side in one run.
#
#   bench/many_cores.sh
#
# 1. Throughput and server CPU per op: bench/tx.sh (read its header for the
#    method: probes, interleaved rounds, medians, /proc/PID/stat CPU) with
#    BENCH_TESTS="set mset10" at pipelines 1 and 16 on these servers:
#      redis     redis-server, persistence off (tx.sh's baseline)
#      tessera   tx.sh's default Tessera (one shard per CPU, consolidated)
#      t2c t8c t32c   --shards 2/8/32, shard consolidation on (the default)
#      t2u t8u t32u   --shards 2/8/32, --shard-consolidation no
#    set = redis-benchmark -t set -d 64 -r KEYSPACE; mset10 = MSET of 10
#    keys key:__rand_int__ (each occurrence its own random number, so the
#    keys of one MSET spread over the shards), 64-byte values.
# 2. The issue's ratios of server CPU per op, from tx.sh's results.csv
#    (medians over rounds): t32c / t2c (consolidated; target <= 1.15),
#    t8u / t2u (unconsolidated; target <= 1.3), and t32u against t2u and
#    against redis. Then the same two ratios round by round (paired within
#    a round), their median and range, and each server's CPU per op over
#    the rounds with its spread: how far this one invocation's figures
#    can be trusted.
# 3. Idle RSS: a fresh Tessera with 2, 16 and 64 shards, consolidated and
#    not, after BENCH_IDLE_WAIT seconds idle (target: <= 64 MB at 64 shards).
#
# Environment: everything bench/tx.sh reads (BENCH_ROUNDS, BENCH_SECONDS,
# BENCH_REQUESTS, BENCH_CLIENTS, BENCH_KEYSPACE, BENCH_CLIENT_CPUS,
# BENCH_SERVER_CPUS, BENCH_TIMEOUT, BENCH_PORT_MIN, BENCH_PORT_SPAN,
# TESSERA_BENCH_BIN, BENCH_SKIP_BUILD, REDIS_SERVER, REDIS_BENCHMARK,
# REDIS_CLI) passes through (BENCH_ROUNDS: default 3, every server in
# every round, the order rotating: see tx.sh), plus:
#   BENCH_SHARDS      shard counts of part 1 (default "2 8 32"; the ratios
#                     need 2, 8 and 32)
#   BENCH_RSS_SHARDS  shard counts of part 3 (default "2 16 64")
#   BENCH_IDLE_WAIT   seconds a fresh server idles before its RSS is read
#                     (default 3)
#   OUT_DIR           results (default ./bench-results/many-cores-<timestamp>;
#                     part 1's raw data in $OUT_DIR/tx)
#
# Default run: 8 servers x 4 tests x 3 rounds x 2.5 s plus probes and
# preloads, about 8 minutes. Smoke run (a minute):
#   BENCH_ROUNDS=1 BENCH_SECONDS=0.2 BENCH_KEYSPACE=1000 BENCH_IDLE_WAIT=1 bench/many_cores.sh
#
# Output: $OUT_DIR/report.md (also printed): tx.sh's table, the ratio table,
# the idle RSS table. The script only ever signals PIDs it started itself.
set -u
set -o pipefail

die() { echo "many_cores.sh: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || die "cannot cd to $ROOT"

CLI=${REDIS_CLI:-redis-cli}
SHARD_COUNTS=${BENCH_SHARDS:-2 8 32}
RSS_SHARDS=${BENCH_RSS_SHARDS:-2 16 64}
IDLE_WAIT=${BENCH_IDLE_WAIT:-3}
OUT_DIR=${OUT_DIR:-./bench-results/many-cores-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${BENCH_ROUNDS:-3}
PORT_MIN=${BENCH_PORT_MIN:-20000}
PORT_SPAN=${BENCH_PORT_SPAN:-12000}
for b in "$CLI" awk timeout; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found"
done
for n in $SHARD_COUNTS $RSS_SHARDS; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "bad shard count '$n'"; done
[[ "$IDLE_WAIT" =~ ^[0-9]+$ ]] || die "BENCH_IDLE_WAIT must be whole seconds"
mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"

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

# ---------------------------------------------------------------- part 1
SERVERS=()
for n in $SHARD_COUNTS; do
  SERVERS+=("t${n}c=$QBIN --port \$PORT --bind 127.0.0.1 --shards $n --shard-consolidation yes")
done
for n in $SHARD_COUNTS; do
  SERVERS+=("t${n}u=$QBIN --port \$PORT --bind 127.0.0.1 --shards $n --shard-consolidation no")
done

echo "== part 1: bench/tx.sh, SET and MSET of 10 keys, pipelines 1 and 16"
TX_OUT="$OUT_DIR/tx"
BENCH_ROUNDS="$ROUNDS" BENCH_TESTS="set mset10" BENCH_PIPELINES="1 16" OUT_DIR="$TX_OUT" \
  TESSERA_BENCH_BIN="$BIN" "$ROOT/bench/tx.sh" "${SERVERS[@]}" ||
  die "bench/tx.sh failed (see $TX_OUT)"
[ -s "$TX_OUT/results.csv" ] || die "no $TX_OUT/results.csv"

# ---------------------------------------------------------------- part 2
# ratio_table: median cpu-us/op per test and server from tx.sh's
# results.csv, then the issue's ratios.
ratio_table() {
  awk -F, '
    function median(list,   arr, n, i, j, t) {
      n = split(list, arr, " ")
      if (n == 0) return "NA"
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] + 0 < arr[i] + 0) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
      return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    function cpu(t, s,   k) { k = t SUBSEP s; return (k in L) ? median(L[k]) : "NA" }
    function ops(t, s,   k) { k = t SUBSEP s; return (k in O) ? median(O[k]) : "NA" }
    function ratio(a, b) { return (a != "NA" && b != "NA" && b > 0) ? sprintf("%.2f", a / b) : "NA" }
    function f(v, fmt) { return (v == "NA") ? v : sprintf(fmt, v) }
    NR == 1 { next }
    {
      if (!($2 in seen)) { seen[$2] = 1; tests[++nt] = $2 }
      if ($11 != "NA" && $11 != "") L[$2 SUBSEP $3] = L[$2 SUBSEP $3] " " $11
      if ($5 != "NA" && $5 != "") O[$2 SUBSEP $3] = O[$2 SUBSEP $3] " " $5
    }
    END {
      print "Server CPU per op (cpu-us/op, median over rounds) and its ratios. Targets (issue 27):"
      print "t32c/t2c <= 1.15, t8u/t2u <= 1.3."
      print ""
      print "| test | redis | t2c | t8c | t32c | t2u | t8u | t32u | **t32c/t2c** | **t8u/t2u** | t32u/t2u | t32u/redis |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 1; i <= nt; i++) {
        t = tests[i]
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t,
          f(cpu(t, "redis"), "%.3f"), f(cpu(t, "t2c"), "%.3f"), f(cpu(t, "t8c"), "%.3f"), f(cpu(t, "t32c"), "%.3f"),
          f(cpu(t, "t2u"), "%.3f"), f(cpu(t, "t8u"), "%.3f"), f(cpu(t, "t32u"), "%.3f"),
          ratio(cpu(t, "t32c"), cpu(t, "t2c")), ratio(cpu(t, "t8u"), cpu(t, "t2u")),
          ratio(cpu(t, "t32u"), cpu(t, "t2u")), ratio(cpu(t, "t32u"), cpu(t, "redis"))
      }
      print ""
      print "Throughput (ops/s, median over rounds; redis-benchmark on the same 2 cores, so"
      print "throughput follows CPU per op and what the load generator leaves):"
      print ""
      print "| test | redis | t2c | t8c | t32c | t2u | t8u | t32u |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 1; i <= nt; i++) {
        t = tests[i]
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", t,
          f(ops(t, "redis"), "%.0f"), f(ops(t, "t2c"), "%.0f"), f(ops(t, "t8c"), "%.0f"), f(ops(t, "t32c"), "%.0f"),
          f(ops(t, "t2u"), "%.0f"), f(ops(t, "t8u"), "%.0f"), f(ops(t, "t32u"), "%.0f")
      }
    }' "$1"
}

# round_table: the same ratios round by round. tx.sh runs every server in
# every round, the order rotating, so a round's t32c and t2c ran minutes
# apart at most, under the same background: a ratio taken within a round
# is paired, and its spread over rounds says how far one invocation's
# median can be trusted. Then each server's CPU per op over the rounds
# (min, median, max, and (max - min) / median): a layout that changed in
# one round (a spread on a burst) shows there.
round_table() {
  awk -F, '
    function median(list,   arr, n, i, j, t) {
      n = split(list, arr, " ")
      if (n == 0) return "NA"
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] + 0 < arr[i] + 0) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
      return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    function lo(list,   arr, n, i, m) { n = split(list, arr, " "); m = arr[1] + 0; for (i = 2; i <= n; i++) if (arr[i] + 0 < m) m = arr[i] + 0; return m }
    function hi(list,   arr, n, i, m) { n = split(list, arr, " "); m = arr[1] + 0; for (i = 2; i <= n; i++) if (arr[i] + 0 > m) m = arr[i] + 0; return m }
    function pair(t, a, b,   r, list, v) {
      list = ""
      for (r = 1; r <= nr; r++) {
        if (!((t, a, r) in C) || !((t, b, r) in C) || C[t, b, r] <= 0) { cell[r] = "NA"; continue }
        v = C[t, a, r] / C[t, b, r]
        cell[r] = sprintf("%.2f", v)
        list = list " " v
      }
      return list
    }
    NR == 1 { next }
    $11 != "NA" && $11 != "" {
      if (!($2 in seen)) { seen[$2] = 1; tests[++nt] = $2 }
      if (!($3 in sseen)) { sseen[$3] = 1; servers[++ns] = $3 }
      C[$2, $3, $1] = $11
      L[$2, $3] = L[$2, $3] " " $11
      if ($1 + 0 > nr) nr = $1 + 0
    }
    END {
      split("t32c/t2c t8u/t2u", names, " ")
      split("t32c t8u", num, " ")
      split("t2c t2u", den, " ")
      for (q = 1; q <= 2; q++) {
        printf "%s, round by round (each round a paired ratio), median and range:\n\n", names[q]
        printf "| test |"
        for (r = 1; r <= nr; r++) printf " round %d |", r
        print " median | min-max |"
        printf "|---|"
        for (r = 1; r <= nr; r++) printf "---:|"
        print "---:|---|"
        for (i = 1; i <= nt; i++) {
          t = tests[i]
          list = pair(t, num[q], den[q])
          printf "| %s |", t
          for (r = 1; r <= nr; r++) printf " %s |", cell[r]
          if (list == "") print " NA | NA |"
          else printf " %.2f | %.2f-%.2f |\n", median(list), lo(list), hi(list)
        }
        print ""
      }
      print "Server CPU per op over the rounds (cpu-us/op: min / median / max, and the spread"
      print "(max - min) / median; above 15 % the server behaved differently from round to round):"
      print ""
      printf "| test |"
      for (s = 1; s <= ns; s++) printf " %s |", servers[s]
      print ""
      printf "|---|"
      for (s = 1; s <= ns; s++) printf "---:|"
      print ""
      for (i = 1; i <= nt; i++) {
        t = tests[i]
        printf "| %s |", t
        for (s = 1; s <= ns; s++) {
          k = t SUBSEP servers[s]
          if (!(k in L)) { printf " NA |"; continue }
          m = median(L[k])
          printf " %.2f / %.2f / %.2f (%.0f%%) |", lo(L[k]), m, hi(L[k]), (m > 0 ? (hi(L[k]) - lo(L[k])) * 100 / m : 0)
        }
        print ""
      }
    }' "$1"
}

# ---------------------------------------------------------------- part 3
declare -A LIVE

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  local p tries=0
  while :; do
    p=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN))
    if ! port_in_use "$p"; then echo "$p"; return 0; fi
    tries=$((tries + 1))
    [ $tries -lt 200 ] || return 1
  done
}

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
trap 'echo "many_cores.sh: interrupted" >&2; exit 130' INT TERM

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo NA; }
threads_of() { awk '/^Threads:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo NA; }

# idle_rss SHARDS CONSOLIDATION -> one CSV line: shards,consolidation,rss_kb,threads
idle_rss() {
  local n=$1 cons=$2 port pid i log="$OUT_DIR/idle-$1-$2.log" rss thr
  port=$(pick_port) || die "no free port found"
  "$BIN" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --shards "$n" --shard-consolidation "$cons" >"$log" 2>&1 </dev/null &
  pid=$!
  LIVE[$pid]=1
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    [ "$(timeout 5 "$CLI" -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null || { tail -5 "$log" >&2; die "tessera --shards $n exited at startup (see $log)"; }
  sleep "$IDLE_WAIT"
  rss=$(rss_kb "$pid")
  thr=$(threads_of "$pid")
  stop_pid "$pid"
  echo "$n,$cons,$rss,$thr"
}

echo "== part 3: idle RSS after ${IDLE_WAIT}s"
RSS_CSV="$OUT_DIR/idle_rss.csv"
echo "shards,consolidation,rss_kb,threads" >"$RSS_CSV"
for n in $RSS_SHARDS; do
  for cons in yes no; do
    line=$(idle_rss "$n" "$cons")
    echo "$line" >>"$RSS_CSV"
    echo "  $line"
  done
done

# ---------------------------------------------------------------- report
REPORT="$OUT_DIR/report.md"
{
  echo "# bench/many_cores.sh run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "## bench/tx.sh (t<N>c: N shards consolidated; t<N>u: N shards, --shard-consolidation no)"
  echo
  cat "$TX_OUT/report.md"
  echo
  echo "## Ratios"
  echo
  ratio_table "$TX_OUT/results.csv"
  echo
  echo "## Round by round ($ROUNDS rounds)"
  echo
  round_table "$TX_OUT/results.csv"
  echo
  echo "## Idle RSS (fresh server, ${IDLE_WAIT}s idle; target <= 64 MB at 64 shards)"
  echo
  echo "| shards | consolidation | RSS MiB | threads |"
  echo "|---:|---|---:|---:|"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s |\n", $1, $2, ($3 == "NA" ? "NA" : sprintf("%.1f", $3 / 1024)), $4 }' "$RSS_CSV"
} >"$REPORT"

echo
cat "$REPORT"
