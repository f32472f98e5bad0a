#!/usr/bin/env bash
# tests/tcl/run.sh — Redis 7.0.15's Tcl units that start their own servers, run against Tessera.
#
#   tests/tcl/run.sh [UNIT ...]        e.g. tests/tcl/run.sh unit/info unit/auth
#
# Copies the Redis source tree ($REDIS_SRC, default /work/redis-src/redis-7.0.15; never modified)
# to $TCL_COPY (default /tmp/tessera-tcl), installs tests/tcl/redis-server there as
# src/redis-server (it execs $TESSERA_BIN, default target/debug/tessera of this repository) and
# Debian's redis-cli / redis-benchmark / redis-check-* (apt-get install redis-tools), then runs
# each unit with `--single UNIT --clients 1`, replication and DEBUG-needing tests excluded.
# Prints one line per unit (ok / err / exception, whether it ran to its end); each unit's full
# output is in $TCL_COPY/out/<unit>.log. Not part of CI: a measurement of what differs from Redis.
# Environment: BASEPORT (default 26000), UNIT_TIMEOUT seconds (default 900), TAGS extra runtest
# arguments (e.g. "--tags -slow"), SKIP test names to skip, one per line (runtest --skiptest: a
# test that stops its unit with an exception, to see the tests after it), EXCLUDE the tags left
# out (default "--tags -needs:repl --tags -needs:debug"; EXCLUDE="--tags -needs:repl" runs the
# tests that need DEBUG too), TESSERA_ARGS arguments added to every Tessera the harness starts
# (e.g. TESSERA_ARGS="--shard-consolidation no" or "--shards 16": the layout the units run in).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
SRC=${REDIS_SRC:-/work/redis-src/redis-7.0.15}
COPY=${TCL_COPY:-/tmp/tessera-tcl}
export TESSERA_BIN=${TESSERA_BIN:-$repo/target/debug/tessera}
export TESSERA_ARGS=${TESSERA_ARGS:-}
[ -x "$TESSERA_BIN" ] || { echo "no tessera binary at $TESSERA_BIN (cargo build first)"; exit 2; }
if [ ! -d "$COPY/tests" ]; then
  [ -d "$SRC/tests" ] || { echo "no Redis source tree at $SRC"; exit 2; }
  cp -r "$SRC" "$COPY"
fi
install -m 755 "$here/redis-server" "$COPY/src/redis-server"
for t in redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
  ln -sf "/usr/bin/$t" "$COPY/src/$t"
done
mkdir -p "$COPY/out"
skips=()
while IFS= read -r t; do
  [ -n "$t" ] && skips+=(--skiptest "$t")
done <<<"${SKIP:-}"
cd "$COPY" || exit 2
for u in "$@"; do
  log="out/${u//\//_}.log"
  # The unit runs in a process group of its own (its test clients and the servers they start
  # included), killed whole when it runs past UNIT_TIMEOUT: `timeout` alone would kill only
  # runtest's shell and leave the rest running.
  # shellcheck disable=SC2086
  setsid ./runtest --single "$u" --clients 1 --baseport "${BASEPORT:-26000}" \
    ${EXCLUDE---tags -needs:repl --tags -needs:debug} "${skips[@]}" ${TAGS:-} >"$log.raw" 2>&1 &
  pid=$!
  # The watcher's output goes nowhere, and its sleep is killed with it: a
  # sleep left running held the caller's pipe open (`run.sh ... | tail`
  # waited out UNIT_TIMEOUT after the unit had ended).
  ( sleep "${UNIT_TIMEOUT:-900}"; kill -TERM -- "-$pid" 2>/dev/null; sleep 5
    kill -KILL -- "-$pid" 2>/dev/null ) >/dev/null 2>&1 &
  watch=$!
  wait "$pid"
  pkill -P "$watch" 2>/dev/null
  kill "$watch" 2>/dev/null
  # Servers of the unit still up (a test that ended in an exception): gone too.
  kill -KILL -- "-$pid" 2>/dev/null
  sed 's/\x1b\[[0-9;]*m//g' "$log.raw" >"$log" && rm -f "$log.raw"
  printf '%-28s ok=%-4s err=%-3s exception=%-2s completed=%s\n' "$u" \
    "$(grep -c '^\[ok\]' "$log")" "$(grep -c '^\[err\]' "$log")" \
    "$(grep -c '^\[exception\]' "$log")" "$(grep -q 'All tests passed' "$log" && echo yes || echo no)"
done
