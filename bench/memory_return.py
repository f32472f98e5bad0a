#!/usr/bin/env python3
"""bench/memory_return.py PORT PID NAME -- one row of the "memory goes back"
table (issue 28), for the server listening on PORT with process id PID.

200 connections each SET a 1 MB value (all sent, then all replies read),
then 300,000 keys of 32 bytes are loaded pipelined on one more connection.
Printed: used_memory and RSS loaded; RSS 1 s and 15 s after FLUSHALL (the
200 connections stay open, idle, the whole time), used_memory at 15 s, and
the worst PING round trip a separate client saw, 10 ms apart, from just
before FLUSHALL to the 15 s mark (what the delete and any return of memory
cost other clients). Run by bench/memory.sh; standard library only.
"""
import socket
import sys
import threading
import time

PORT, PID, NAME = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
CONNS, BIG, SMALL_KEYS = 200, 1 << 20, 300_000


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def connect():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_replies(s, n):
    """Reads n simple replies (+OK / :int / $bulk of INFO) roughly: counts
    CRLF-terminated status lines; enough for SET/PING/FLUSHALL."""
    buf, got = b"", 0
    while got < n:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise SystemExit(f"{NAME}: connection closed")
        buf += chunk
        got = buf.count(b"\r\n")
    return buf


def info_memory(s):
    s.sendall(enc("INFO", "memory"))
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(1 << 16)
    head, rest = buf.split(b"\r\n", 1)
    n = int(head[1:])
    while len(rest) < n + 2:
        rest += s.recv(1 << 16)
    fields = {}
    for line in rest[:n].decode(errors="replace").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v
    return fields


def rss():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def mb(x):
    return f"{x / 1e6:.1f}"


ctl = connect()
val = b"v" * BIG
big = [connect() for _ in range(CONNS)]
for i, s in enumerate(big):
    s.sendall(enc("SET", f"big:{i}", val))
for s in big:
    read_replies(s, 1)
small = connect()
batch = 10_000
for start in range(0, SMALL_KEYS, batch):
    small.sendall(b"".join(enc("SET", f"key:{i}", "x" * 32) for i in range(start, start + batch)))
    read_replies(small, batch)
time.sleep(0.5)
loaded = info_memory(ctl)
loaded_rss = rss()

worst = [0.0]
stop = threading.Event()


def pinger():
    p = connect()
    while not stop.is_set():
        t = time.perf_counter()
        p.sendall(enc("PING"))
        read_replies(p, 1)
        worst[0] = max(worst[0], time.perf_counter() - t)
        time.sleep(0.01)


th = threading.Thread(target=pinger, daemon=True)
th.start()
time.sleep(0.1)
t0 = time.time()
ctl.sendall(enc("FLUSHALL"))
read_replies(ctl, 1)
time.sleep(max(0.0, t0 + 1 - time.time()))
rss1 = rss()
time.sleep(max(0.0, t0 + 15 - time.time()))
rss15 = rss()
stop.set()
th.join()
after = info_memory(ctl)
print(
    f"{NAME:<14} {mb(int(loaded.get('used_memory', 0))):>10} {mb(loaded_rss):>10} "
    f"{mb(rss1):>10} {mb(rss15):>10} {mb(int(after.get('used_memory', 0))):>12} "
    f"{after.get('mem_fragmentation_ratio', '?'):>6} {worst[0] * 1000:>9.1f}"
)
