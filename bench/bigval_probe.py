#!/usr/bin/env python3
"""Stall probe for a BGSAVE of one big value (see bench/bigval_stall.sh).

    bigval_probe.py PORT N [SMALL]

FLUSHALL, fill the zset `bigz` with N members (and SMALL small keys), then
BGSAVE and send ZSCORE bigz in a loop on one connection until INFO says the
save ended. Prints `stall` = the larger of the BGSAVE reply time and the
slowest probe (a save step or copy that writes the whole value stalls one
or the other), the save time and latency percentiles. With SRVPID set to
the server's pid, also its RSS before and peak during the save (that process
only: a forked child is not counted; the peak is
reset through /proc/PID/clear_refs first)."""
import socket, sys, time

def conn(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

class C:
    def __init__(self, port):
        self.s = conn(port); self.buf = b""
    def reply(self):
        while True:
            r = self._parse(0)
            if r is not None:
                val, end = r; self.buf = self.buf[end:]; return val
            d = self.s.recv(1 << 20)
            if not d: raise EOFError
            self.buf += d
    def _parse(self, i):
        b = self.buf
        j = b.find(b"\r\n", i)
        if j < 0: return None
        t, line = b[i:i+1], b[i+1:j]
        if t in (b"+", b"-", b":"): return line, j + 2
        if t == b"$":
            n = int(line)
            if n < 0: return None, j + 2
            if len(b) < j + 2 + n + 2: return None
            return b[j+2:j+2+n], j + 2 + n + 2
        if t == b"*":
            n = int(line); k = j + 2; arr = []
            for _ in range(n):
                r = self._parse(k)
                if r is None: return None
                arr.append(r[0]); k = r[1]
            return arr, k
        raise ValueError(b[i:i+20])
    def cmd(self, *a):
        self.s.sendall(enc(*a)); return self.reply()

port, n = int(sys.argv[1]), int(sys.argv[2])
small = int(sys.argv[3]) if len(sys.argv) > 3 else 0
c = C(port)
c.cmd("FLUSHALL")
batch = 1000
sent = 0
for start in range(0, n, batch):
    args = ["ZADD", "bigz"]
    for i in range(start, min(n, start + batch)):
        args += [str(i * 0.5), "member:%d" % i]
    c.s.sendall(enc(*args)); sent += 1
    if sent >= 50:
        for _ in range(sent): c.reply()
        sent = 0
for _ in range(sent): c.reply()
assert int(c.cmd("ZCARD", "bigz")) == n
# small keys too, so the save has other work before it meets the big key
for start in range(0, small, 1000):
    c.s.sendall(enc("MSET", *sum([["s:%d" % i, "v%d" % i] for i in range(start, min(small, start + 1000))], [])))
    c.reply()
time.sleep(0.5)
import os
pid = os.environ.get("SRVPID")
def status(f):
    for line in open("/proc/%s/status" % pid):
        if line.startswith(f): return int(line.split()[1]) // 1024
rss0 = 0
if pid:
    open("/proc/%s/clear_refs" % pid, "w").write("5")
    rss0 = status("VmRSS")
probe = C(port)
info = C(port)
lat = []
t0 = time.perf_counter()
assert c.cmd("BGSAVE").startswith(b"Background")
bg = time.perf_counter() - t0
last_check = 0
while True:
    a = time.perf_counter()
    probe.cmd("ZSCORE", "bigz", "member:12345")
    lat.append(time.perf_counter() - a)
    now = time.perf_counter()
    if now - last_check > 0.02:
        last_check = now
        if b"rdb_bgsave_in_progress:0" in info.cmd("INFO", "persistence"):
            break
dur = time.perf_counter() - t0
if pid:
    print("rss before %d MiB, peak during save %d MiB (+%d MiB)" % (rss0, status("VmHWM"), status("VmHWM") - rss0))
lat.sort()
print("stall=%.1fms small=%d n=%d bgsave_reply=%.1fms save=%.0fms probes=%d max=%.1fms p99=%.2fms p999=%.2fms" % (
    max(bg, lat[-1]) * 1000, small, n, bg * 1000, dur * 1000, len(lat), lat[-1] * 1000, lat[int(len(lat) * 0.99)] * 1000,
    lat[int(len(lat) * 0.999)] * 1000))
