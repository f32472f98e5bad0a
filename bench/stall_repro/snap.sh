#!/bin/bash
# snap.sh READER_PORT READER: state of the server while a reader's MGET is stalled (non-invasive)
PID=$(cat $(dirname "$(readlink -f "$0")")/cur.pid); RPORT=$1; N=$(date +%H%M%S.%N | cut -c1-10)
F=$(dirname "$(readlink -f "$0")")/snap-$N-r$2.txt
{
echo "reader $2 port $1 at $(date +%T.%N)"
ss -tnpi "sport = :$1 or dport = :$1"
echo "--- all server sockets with Recv-Q>0 or Send-Q>0"
ss -tn "sport = :$(cat $(dirname "$(readlink -f "$0")")/cur.port)" | awk 'NR==1 || $2>0 || $3>0' | head -20
for i in 1 2 3; do
echo "--- threads ($i) $(date +%T.%N)"
for t in /proc/$PID/task/*; do
  sc=$(cat $t/syscall 2>/dev/null)
  echo "$t $(cat $t/comm) $(cut -d' ' -f3,14,15 $t/stat) $(cat $t/wchan) syscall=$sc"
  set -- $sc
  if [ "$1" = 202 ]; then a=$((16#${2#0x})); awk -v a=$a '{split($1,r,"-"); lo=strtonum("0x" r[1]); hi=strtonum("0x" r[2]); if (a>=lo && a<hi) print "    futex in", $0}' /proc/$PID/maps; fi
  cat $t/stack 2>/dev/null | head -4 | sed 's/^/    /'
done
sleep 0.4
done
echo "--- reader socket now:"
ss -tn "sport = :$RPORT or dport = :$RPORT"
} > $F 2>&1
