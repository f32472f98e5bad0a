#!/usr/bin/env bash
# bench/persist.sh — BGSAVE under a write load, Tessera next to Redis in one run.
#
#   bench/persist.sh
#
# For each server: load BENCH_KEYS keys of BENCH_VALUE bytes (redis-cli
# --pipe), then start BGSAVE while redis-benchmark runs SETs over the same
# key space (50 clients, pipeline 16), and sample every 10 ms, until the save
# ends, the memory of the server's whole process tree (PSS: Redis's forked
# child counts, its shared pages only once). Reports
#   * memory before the save, peak during it, growth in %;
#   * the save's duration;
#   * SET throughput during the save (commands counted by INFO between
#     start and end of the save), and the same benchmark without a save.
#
# Environment: BENCH_KEYS (1000000), BENCH_VALUE (100), BENCH_SHARDS (2),
# TESSERA_BENCH_BIN (skip the build), BENCH_SKIP_BUILD=1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KEYS=${BENCH_KEYS:-1000000}
VALUE=${BENCH_VALUE:-100}
SHARDS=${BENCH_SHARDS:-2}
if [ -n "${TESSERA_BENCH_BIN:-}" ]; then
  BIN=$TESSERA_BENCH_BIN
else
  [ "${BENCH_SKIP_BUILD:-0}" = 1 ] || cargo build --release -q
  BIN=$ROOT/target/release/tessera
fi
WORK=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$WORK"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# PSS in KiB of a process and its children.
tree_pss() {
  local pids total=0 p kb
  pids="$1 $(pgrep -P "$1" 2>/dev/null | tr '\n' ' ')"
  for p in $pids; do
    kb=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    total=$((total + ${kb:-0}))
  done
  echo "$total"
}

info() { redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v k="$3" '$1==k {print $2}'; }

run_one() {
  local name=$1 port=$2 pid=$3
  redis-cli -p "$port" --pipe <"$WORK/load.resp" >/dev/null
  sleep 1
  local before peak=0 m t0 t1 c0 c1 secs
  before=$(tree_pss "$pid")
  # Baseline: the same write load for about as long, no save.
  c0=$(info "$port" stats total_commands_processed)
  t0=$(date +%s.%N)
  timeout 3 redis-benchmark -p "$port" -t set -r "$KEYS" -d "$VALUE" -c 50 -P 16 -n 100000000 -q >/dev/null 2>&1 || true
  t1=$(date +%s.%N)
  c1=$(info "$port" stats total_commands_processed)
  local base_ops
  base_ops=$(python3 -c "print(int(($c1-$c0)/($t1-$t0)))")
  # The save under the same load.
  redis-benchmark -p "$port" -t set -r "$KEYS" -d "$VALUE" -c 50 -P 16 -n 100000000 -q >/dev/null 2>&1 &
  local bench=$!
  sleep 0.5
  c0=$(info "$port" stats total_commands_processed)
  t0=$(date +%s.%N)
  redis-cli -p "$port" BGSAVE >/dev/null
  while :; do
    m=$(tree_pss "$pid")
    [ "$m" -gt "$peak" ] && peak=$m
    [ "$(info "$port" persistence rdb_bgsave_in_progress)" = 0 ] && break
    sleep 0.01
  done
  t1=$(date +%s.%N)
  c1=$(info "$port" stats total_commands_processed)
  kill "$bench" 2>/dev/null || true
  wait "$bench" 2>/dev/null || true
  local status
  status=$(info "$port" persistence rdb_last_bgsave_status)
  python3 - "$name" "$before" "$peak" "$t0" "$t1" "$c0" "$c1" "$base_ops" "$status" <<'EOF'
import sys
name, before, peak, t0, t1, c0, c1, base, status = sys.argv[1:]
before, peak, base = int(before), int(peak), int(base)
secs = float(t1) - float(t0)
ops = (int(c1) - int(c0)) / secs
print(f"{name:8} mem_before={before/1024:8.1f}MiB peak={peak/1024:8.1f}MiB "
      f"growth={100*(peak-before)/before:6.1f}% save={secs:6.2f}s "
      f"set_ops_during_save={ops:10.0f} set_ops_no_save={base:10d} status={status}")
EOF
}

echo "keys=$KEYS value=${VALUE}B shards=$SHARDS"
# The keys redis-benchmark -r writes (key:000000000042), so the load under
# the save overwrites existing keys.
python3 - "$KEYS" "$VALUE" >"$WORK/load.resp" <<'EOF'
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
v = b"x" * size
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, size, v))
EOF
for name in redis tessera; do
  port=$(free_port)
  dir="$WORK/$name"; mkdir -p "$dir"
  if [ "$name" = redis ]; then
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
  else
    "$BIN" --port "$port" --bind 127.0.0.1 --save "" --shards "$SHARDS" --dir "$dir" >"$dir/log" 2>&1 &
  fi
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.05; done
  run_one "$name" "$port" "$pid"
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
done
