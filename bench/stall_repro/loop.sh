#!/bin/bash
# loop.sh BIN N [server args]: N fresh servers, one drv run each; logs in loop/
BIN=$1; N=$2; shift 2
mkdir -p $(dirname "$(readlink -f "$0")")/loop; cd "$(dirname "$(readlink -f "$0")")"
for i in $(seq 1 $N); do
  PORT=$((21100 + i % 800))
  $BIN --port $PORT --shards 3 --loglevel verbose "$@" 2>&1 | grep --line-buffered -v "Client closed\|Accepted\|not stuck" > loop/srv-$i.log &
  sleep 0.2
  PID=$(pgrep -f "tessera --port $PORT ")
  echo $PID > cur.pid; echo $PORT > cur.port
  for t in 1 2 3 4 5 6 7 8 9 10; do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
  ./target/release/stall_repro $PORT 1 1500 > loop/drv-$i.log 2>&1
  if grep -q "slow\|stalled" loop/drv-$i.log && ! grep -q "0 slow" loop/drv-$i.log; then echo "run $i: $(grep took loop/drv-$i.log)"; else rm -f loop/srv-$i.log loop/drv-$i.log; fi
  kill $PID; wait 2>/dev/null
done
echo "loop done $N"
