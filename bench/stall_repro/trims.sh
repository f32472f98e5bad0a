#!/bin/bash
# trims.sh BIN PORT TAG: one fresh 3-shard server, one driver run, then 2.5 s idle.
# Prints the slowest MGET, the automatic trims that ran during the load and
# after it (from the verbose log), the longest trim and RSS at the load's end
# and 2.5 s later. Logs in loop/trims-TAG-{srv,drv}.log. Alternate two
# binaries run by run (same load): see bench/README.md.
BIN=$1; PORT=$2; TAG=$3
cd "$(dirname "$(readlink -f "$0")")"; mkdir -p loop
SRV=loop/trims-$TAG-srv.log; DRV=loop/trims-$TAG-drv.log
DATA=$(mktemp -d)
$BIN --port "$PORT" --shards 3 --loglevel verbose --save "" --dir "$DATA" > "$SRV" 2>&1 &
SP=$!
for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
DRV_REPORT_MS=20 ./target/release/stall_repro "$PORT" 1 100000 > "$DRV" 2>&1
END=$(date +%H:%M:%S.%3N)
RSS1=$(awk '/VmRSS/ {print $2}' /proc/$SP/status)
sleep 2.5
RSS2=$(awk '/VmRSS/ {print $2}' /proc/$SP/status)
kill $SP; wait $SP 2>/dev/null; rm -rf "$DATA"
MAX=$(grep -o "MGET took [0-9]*" "$DRV" | awk '{if ($3 > m) m = $3} END {print m + 0}')
# Log lines: "PID:M 28 Nov 2026 12:47:29.384 - Returned ... in N us ..."
OVER=$(grep "Returned" "$SRV" | awk -v e="$END" '{if ($5 < e) d++; else a++} END {printf "%d during the load, %d after", d, a}')
LONG=$(grep -o "in [0-9]* us" "$SRV" | awk '{if ($2 > m) m = $2} END {print m + 0}')
echo "$TAG: slowest MGET $MAX ms; trims $OVER, longest $LONG us; RSS ${RSS1} KB at the end, ${RSS2} KB 2.5 s later"
