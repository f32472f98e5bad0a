#!/usr/bin/env bash
# bench/tls.sh — GET/SET over TLS at pipeline 16 (issue 26.3): Tessera next
# to Redis 7's own TLS (redis-server --tls-port), in one run.
#
#   bench/tls.sh [NAME=CMD ...]
#
# Tests (redis-benchmark --tls with a client certificate, 50 clients,
# 64-byte values, keyspace 100000 preloaded):
#
#   set_p16  redis-benchmark -t set -P 16
#   get_p16  redis-benchmark -t get -P 16
#
# Servers, each started in the foreground on free loopback ports, TLS on
# $TLS_PORT with client certificates required (tls-auth-clients yes, the
# default of both), persistence off:
#   redis    redis-server --port $PORT --tls-port $TLS_PORT ...
#   tessera  target/release/tessera --port $PORT --tls-port $TLS_PORT ...
# Extra NAME=CMD arguments add servers (CMD run as `exec CMD` with PORT,
# TLS_PORT, CERT, KEY and CA exported; single-quote it), e.g. a "before"
# build: bench/tls.sh 'old=/tmp/old/tessera --port $PORT --tls-port $TLS_PORT
# --tls-cert-file $CERT --tls-key-file $KEY --tls-ca-cert-file $CA'
#
# Certificates: a throwaway CA, server and client certificate made with the
# openssl CLI in a temporary directory (removed at exit).
#
# Method: an unmeasured probe per test and server (warm-up, and the rate
# that sizes the measured run to about BENCH_SECONDS), then BENCH_ROUNDS
# rounds; each round runs every test on every server, the server order
# rotating between rounds. Tables show the median over rounds. Server CPU =
# utime+stime of the server PID (all threads) from /proc/PID/stat right
# before and after a run; cpu-us/op = that / requests, the first column,
# since CPU per op is what TLS costs (throughput on a 2-core box is bounded
# by the load generator's own TLS work).
#
# Environment (all optional):
#   BENCH_ROUNDS       rounds (default 3)
#   BENCH_SECONDS      target length of one measured run (default 3)
#   BENCH_REQUESTS     fixed request count per measured run (no sizing)
#   BENCH_PIPELINE     pipeline depth (default 16)
#   BENCH_CLIENTS      connections (default 50)
#   BENCH_KEYSPACE     -r keyspace and preload size (default 100000)
#   BENCH_PLAIN=1      also run each test over plain TCP (the TLS overhead)
#   BENCH_CLIENT_CPUS  taskset CPU list for redis-benchmark (default unpinned)
#   BENCH_SERVER_CPUS  taskset CPU list for the servers (default unpinned)
#   BENCH_TIMEOUT      hard cap in seconds per redis-benchmark run (default 120)
#   TESSERA_BENCH_BIN  Tessera binary to use (skips the build)
#   BENCH_SKIP_BUILD=1 do not run cargo build --release
#   REDIS_SERVER, REDIS_BENCHMARK, REDIS_CLI, OPENSSL  binaries (from PATH)
#   OUT_DIR            raw results and report (default
#                      ./bench-results/tls-<timestamp>)
#
# Default run: 2 servers x 2 tests x 3 rounds x 3 s, about a minute.
# Smoke run:   BENCH_ROUNDS=1 BENCH_SECONDS=0.3 bench/tls.sh
#
# Output: $OUT_DIR/results.csv, $OUT_DIR/report.md (also printed), server
# logs, redis-benchmark output. The script only ever signals PIDs it
# started itself.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

RS=${REDIS_SERVER:-redis-server}
RB=${REDIS_BENCHMARK:-redis-benchmark}
CLI=${REDIS_CLI:-redis-cli}
OPENSSL=${OPENSSL:-openssl}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-3}
FIXED=${BENCH_REQUESTS:-}
PIPE=${BENCH_PIPELINE:-16}
CLIENTS=${BENCH_CLIENTS:-50}
KEYSPACE=${BENCH_KEYSPACE:-100000}
PLAIN=${BENCH_PLAIN:-0}
TIMEOUT=${BENCH_TIMEOUT:-120}
OUT_DIR=${OUT_DIR:-./bench-results/tls-$(date +%Y%m%d-%H%M%S)}

die() { echo "bench/tls.sh: $*" >&2; exit 1; }
for b in "$RS" "$RB" "$CLI" "$OPENSSL"; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found"
done
"$RB" --help 2>&1 | grep -q -- '--tls' || die "$RB was built without TLS"

if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  [ "${BENCH_SKIP_BUILD:-0}" = 1 ] || cargo build --release
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera
fi
[ -x "$BIN" ] || die "$BIN is not an executable"
mkdir -p "$OUT_DIR"

# ------------------------------------------------------------ cleanup
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local p i
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# ------------------------------------------------------------ certificates
export CA=$WORK/ca.crt CERT=$WORK/server.crt KEY=$WORK/server.key
CCERT=$WORK/client.crt
CKEY=$WORK/client.key
{
  "$OPENSSL" req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$CA" \
    -days 2 -subj "/CN=bench CA"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' \
    > "$WORK/ext.cnf"
  for who in server client; do
    "$OPENSSL" req -newkey rsa:2048 -nodes -keyout "$WORK/$who.key" \
      -out "$WORK/$who.csr" -subj "/CN=$who"
    "$OPENSSL" x509 -req -in "$WORK/$who.csr" -CA "$CA" -CAkey "$WORK/ca.key" \
      -CAcreateserial -out "$WORK/$who.crt" -days 2 -extfile "$WORK/ext.cnf"
  done
} >"$WORK/openssl.log" 2>&1 || { cat "$WORK/openssl.log" >&2; die "openssl failed"; }
TLS_ARGS=(--tls --cacert "$CA" --cert "$CCERT" --key "$CKEY")

# ------------------------------------------------------------ servers
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
TLS_COMMON='--tls-port $TLS_PORT --tls-cert-file $CERT --tls-key-file $KEY --tls-ca-cert-file $CA'
SERVERS=(
  "redis=$RS --bind 127.0.0.1 --port \$PORT $TLS_COMMON --save '' --appendonly no"
  "tessera=$BIN --bind 127.0.0.1 --port \$PORT $TLS_COMMON --save ''"
)
SERVERS+=("$@")
NAMES=() ; SPIDS=() ; PORTS=() ; TPORTS=()
for spec in "${SERVERS[@]}"; do
  name=${spec%%=*}
  cmd=${spec#*=}
  export PORT TLS_PORT
  PORT=$(free_port)
  TLS_PORT=$(free_port)
  pin=()
  [ -n "${BENCH_SERVER_CPUS:-}" ] && pin=(taskset -c "$BENCH_SERVER_CPUS")
  "${pin[@]}" bash -c "exec $cmd" >"$OUT_DIR/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  ok=0
  for _ in $(seq 100); do
    if "$CLI" -p "$TLS_PORT" "${TLS_ARGS[@]}" PING 2>/dev/null | grep -q PONG; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$ok" = 1 ] || { cat "$OUT_DIR/$name.log" >&2; die "$name did not answer PING over TLS"; }
  NAMES+=("$name"); SPIDS+=("$pid"); PORTS+=("$PORT"); TPORTS+=("$TLS_PORT")
  # Preload the keyspace (plain port: loading is not what is measured).
  "$RB" -p "$PORT" -t set -n "$KEYSPACE" -r "$KEYSPACE" -d 64 -P 64 -q >/dev/null 2>&1 || true
  echo "started $name (pid $pid, port $PORT, tls-port $TLS_PORT)"
done

# ------------------------------------------------------------ measuring
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

# run NAME_INDEX TEST MODE REQUESTS -> prints "rps cpu_us_per_op"
run() {
  local i=$1 test=$2 mode=$3 n=$4 port extra=() pin=() c0 c1 out rps
  if [ "$mode" = tls ]; then port=${TPORTS[$i]}; extra=("${TLS_ARGS[@]}"); else port=${PORTS[$i]}; fi
  [ -n "${BENCH_CLIENT_CPUS:-}" ] && pin=(taskset -c "$BENCH_CLIENT_CPUS")
  c0=$(cpu_ticks "${SPIDS[$i]}")
  out=$(timeout "$TIMEOUT" "${pin[@]}" "$RB" -p "$port" "${extra[@]}" -t "${test%_p*}" \
        -n "$n" -r "$KEYSPACE" -d 64 -P "$PIPE" -c "$CLIENTS" --csv 2>>"$OUT_DIR/benchmark.err") || true
  c1=$(cpu_ticks "${SPIDS[$i]}")
  echo "$out" >>"$OUT_DIR/benchmark.out"
  rps=$(echo "$out" | awk -F'"' 'NR==2 {print $4}')
  [ -n "$rps" ] || rps=0
  awk -v r="$rps" -v d=$((c1 - c0)) -v t="$TICK" -v n="$n" \
    'BEGIN { printf "%s %.3f\n", r, (d / t) * 1e6 / n }'
}

TESTS=(set_p16 get_p16)
MODES=(tls)
[ "$PLAIN" = 1 ] && MODES+=(plain)
echo "round,test,mode,server,requests,rps,cpu_us_per_op" >"$OUT_DIR/results.csv"
declare -A SIZE
for t in "${TESTS[@]}"; do
  for m in "${MODES[@]}"; do
    for i in "${!NAMES[@]}"; do
      if [ -n "$FIXED" ]; then
        SIZE[$t,$m,$i]=$FIXED
      else
        read -r rps _ < <(run "$i" "$t" "$m" 20000)
        SIZE[$t,$m,$i]=$(awk -v r="$rps" -v s="$SECONDS_PER_RUN" \
          'BEGIN { n = int(r * s); if (n < 20000) n = 20000; print n }')
      fi
    done
  done
done
n_srv=${#NAMES[@]}
for r in $(seq "$ROUNDS"); do
  for t in "${TESTS[@]}"; do
    for m in "${MODES[@]}"; do
      for k in $(seq 0 $((n_srv - 1))); do
        i=$(( (k + r - 1) % n_srv ))
        n=${SIZE[$t,$m,$i]}
        read -r rps cpu < <(run "$i" "$t" "$m" "$n")
        echo "$r,$t,$m,${NAMES[$i]},$n,$rps,$cpu" >>"$OUT_DIR/results.csv"
        printf '  round %s %-8s %-5s %-10s %12s rps %8s cpu-us/op\n' "$r" "$t" "$m" "${NAMES[$i]}" "$rps" "$cpu"
      done
    done
  done
done

# ------------------------------------------------------------ report
{
  echo "# TLS GET/SET, pipeline $PIPE, $CLIENTS clients ($(date -u +%F), $(nproc) CPUs)"
  echo
  echo "Median of $ROUNDS rounds. Ratios against ${NAMES[0]}."
  echo
  echo "| test | mode | server | cpu-us/op | ratio | rps | ratio |"
  echo "|---|---|---|---:|---:|---:|---:|"
  python3 - "$OUT_DIR/results.csv" "${NAMES[0]}" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
base = sys.argv[2]
med = {}
for r in rows:
    k = (r["test"], r["mode"], r["server"])
    med.setdefault(k, ([], []))
    med[k][0].append(float(r["cpu_us_per_op"]))
    med[k][1].append(float(r["rps"]))
for (t, m, s), (cpu, rps) in med.items():
    c, q = statistics.median(cpu), statistics.median(rps)
    bc, bq = (statistics.median(v) for v in med[(t, m, base)])
    print(f"| {t} | {m} | {s} | {c:.2f} | {c / bc if bc else 0:.2f} | {q:.0f} | {q / bq if bq else 0:.2f} |")
EOF
} | tee "$OUT_DIR/report.md"
