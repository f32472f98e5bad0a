#!/bin/bash
# first.sh BIN PORT TAG [server args]: one fresh 3-shard server, one driver
# run, then 1.5 s idle. Prints each reader's first MGET (wall time and the
# server CPU it took, which a loaded machine does not stretch), and the
# server's CPU for the whole run including its backlog. Logs in
# loop/first-TAG-{srv,drv}.log. Alternate two binaries run by run (same
# load): see bench/README.md.
BIN=$1; PORT=$2; TAG=$3; shift 3
cd "$(dirname "$(readlink -f "$0")")"; mkdir -p loop
SRV=loop/first-$TAG-srv.log; DRV=loop/first-$TAG-drv.log
DATA=$(mktemp -d)
$BIN --port "$PORT" --shards 3 --save "" --dir "$DATA" "$@" > "$SRV" 2>&1 &
SP=$!
for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
SERVER_PID=$SP DRV_REPORT_MS=100000 ./target/release/stall_repro "$PORT" 1 100000 > "$DRV" 2>&1
sleep 1.5
TOTAL=$(awk '{print ($14 + $15) * 10}' /proc/$SP/stat)
kill $SP; wait $SP 2>/dev/null; rm -rf "$DATA"
echo "$TAG: server CPU ${TOTAL} ms in all; $(grep -o 'reader [01]: first MGET [0-9]* ms (server CPU [0-9]* ms)' "$DRV" | sort | tr '\n' ';')"
