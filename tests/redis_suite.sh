#!/usr/bin/env bash
# tests/redis_suite.sh — Redis 7.0.15's own Tcl test units against a running
# server (Tessera or Redis), tests needing DEBUG or replication excluded.
#
#   tests/redis_suite.sh PORT [UNIT ...]      (default units below)
#
# Needs the Redis 7.0.15 source tree in $REDIS_SRC (default
# /work/redis-src/redis-7.0.15) and tclsh. On Debian bookworm: add a
# `Types: deb-src` entry for bookworm to /etc/apt/sources.list.d, then
# `apt-get update && apt-get source redis && apt-get install tcl`.
# Prints one line per unit: passed / failed / exceptions, and whether the
# unit ran to its end. A measurement, not part of CI yet.
set -uo pipefail
PORT=${1:?port}; shift
SRC=${REDIS_SRC:-/work/redis-src/redis-7.0.15}
UNITS=("$@")
if [ ${#UNITS[@]} -eq 0 ]; then
  UNITS=(unit/pubsub unit/tracking unit/type/string unit/type/incr unit/type/hash
    unit/type/list unit/type/set unit/type/zset unit/type/stream
    unit/type/stream-cgroups unit/hyperloglog unit/bitops unit/bitfield unit/geo
    unit/multi unit/scripting unit/functions unit/acl unit/slowlog unit/pause)
fi
cd "$SRC" || { echo "no Redis source tree at $SRC"; exit 2; }
for u in "${UNITS[@]}"; do
  out=$(timeout "${UNIT_TIMEOUT:-240}" ./runtest --host 127.0.0.1 --port "$PORT" --single "$u" \
    --tags -needs:debug --tags -needs:repl 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
  printf '%-28s ok=%-4s err=%-3s exception=%-2s completed=%s\n' "$u" \
    "$(grep -c '^\[ok\]' <<<"$out")" "$(grep -c '^\[err\]' <<<"$out")" \
    "$(grep -c '^\[exception\]' <<<"$out")" "$(grep -q 'All tests passed' <<<"$out" && echo yes || echo no)"
done
